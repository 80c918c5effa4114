// The kernel sources under kernels/, embedded into the library at build time.
#pragma once

#include <optional>
#include <span>
#include <string_view>

namespace cudarc::detail {

struct EmbeddedSource {
    std::string_view name;    // file name, e.g. "bench.cu"
    std::string_view source;  // the file's text
};

[[nodiscard]] std::span<const EmbeddedSource> embedded_kernel_sources() noexcept;

// The embedded source named `name`, if any.
[[nodiscard]] inline std::optional<std::string_view> find_embedded_source(std::string_view name) noexcept {
    for (const auto& entry : embedded_kernel_sources()) {
        if (entry.name == name) return entry.source;
    }
    return std::nullopt;
}

}  // namespace cudarc::detail
