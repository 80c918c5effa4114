// Parses ptxas' -v report. The lines it reads look like:
//   ptxas info    : Compiling entry function 'bench_copy' for 'sm_90'
//   ptxas info    : Function properties for bench_copy
//   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 14 registers, used 0 barriers, 1024 bytes smem, 368 bytes cmem[0]
#include "cudarc/ptxas_report.hpp"

#include <cctype>
#include <optional>

namespace cudarc {
namespace {

// The text between the first pair of single quotes after `from`.
std::optional<std::string_view> quoted(std::string_view line, std::size_t from = 0) {
    const auto open = line.find('\'', from);
    if (open == std::string_view::npos) return std::nullopt;
    const auto close = line.find('\'', open + 1);
    if (close == std::string_view::npos) return std::nullopt;
    return line.substr(open + 1, close - open - 1);
}

// The number written just before `unit` (e.g. "14" in "Used 14 registers"), if any.
std::optional<std::size_t> number_before(std::string_view line, std::string_view unit) {
    auto at = line.find(unit);
    while (at != std::string_view::npos) {
        std::size_t end = at;
        while (end > 0 && line[end - 1] == ' ') --end;
        std::size_t begin = end;
        while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1]))) --begin;
        if (begin < end) {
            std::size_t value = 0;
            for (std::size_t i = begin; i < end; ++i)
                value = value * 10 + static_cast<std::size_t>(line[i] - '0');
            return value;
        }
        at = line.find(unit, at + unit.size());
    }
    return std::nullopt;
}

}  // namespace

std::vector<KernelResourceUsage> parse_ptxas_report(std::string_view log) {
    std::vector<KernelResourceUsage> kernels;
    KernelResourceUsage* current = nullptr;
    bool properties_of_current = false;  // the next stack-frame line belongs to the current entry
    std::size_t start = 0;
    while (start <= log.size()) {
        auto end = log.find('\n', start);
        if (end == std::string_view::npos) end = log.size();
        const std::string_view line = log.substr(start, end - start);
        start = end + 1;
        if (!line.starts_with("ptxas")) continue;

        if (const auto at = line.find("Compiling entry function"); at != std::string_view::npos) {
            const auto name = quoted(line, at);
            if (!name) continue;
            KernelResourceUsage usage;
            usage.function = std::string(*name);
            const auto arch = quoted(line, line.find(*name, at) + name->size() + 1);
            if (arch) usage.arch = std::string(*arch);
            kernels.push_back(std::move(usage));
            current = &kernels.back();
            properties_of_current = false;
        } else if (const auto props = line.find("Function properties for ");
                   props != std::string_view::npos) {
            // Device functions get a properties block too; only the entry's own counts.
            std::string_view name = line.substr(props + 24);
            while (!name.empty() && (name.back() == '\r' || name.back() == ' ')) name.remove_suffix(1);
            properties_of_current = current != nullptr && name == current->function;
        } else if (line.find("bytes stack frame") != std::string_view::npos) {
            if (current != nullptr && properties_of_current) {
                current->stack_bytes = number_before(line, "bytes stack frame").value_or(0);
                current->spill_store_bytes = number_before(line, "bytes spill stores").value_or(0);
                current->spill_load_bytes = number_before(line, "bytes spill loads").value_or(0);
            }
            properties_of_current = false;
        } else if (line.find("Used ") != std::string_view::npos && current != nullptr) {
            current->registers = static_cast<int>(number_before(line, "registers").value_or(0));
            current->shared_bytes = number_before(line, "bytes smem").value_or(0);
        }
    }
    return kernels;
}

}  // namespace cudarc
