// Fills the RtcApi table from hiprtc (libhiprtc, or libamdhip64 on older ROCm), loaded at run time.
#include "sys/hip/hiprtc_loader.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string_view>
#include <system_error>
#include <unordered_map>

#include "sys/backends.hpp"
#include "sys/dynamic_library.hpp"
#include "sys/hip/comgr_targets.hpp"

namespace cudarc::sys {
namespace {

constexpr const char* kHiprtcSonames[] = {"libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so.5"};
constexpr const char* kHipSonames[] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"};
constexpr RtcResult kRtcErrorInvalidOption = 5;  // HIPRTC_ERROR_INVALID_OPTION (NVRTC's number too)

// The hiprtc entry points the adapters below wrap, and the targets its comgr knows.
struct HiprtcState {
    const char* (*get_error_string)(RtcResult result) = nullptr;
    RtcResult (*create_program)(RtcProgram* program, const char* source, const char* name, int num_headers,
                                const char* const* headers, const char* const* include_names) = nullptr;
    RtcResult (*compile_program)(RtcProgram program, int num_options, const char* const* options) = nullptr;
    RtcResult (*get_log_size)(RtcProgram program, std::size_t* bytes) = nullptr;
    RtcResult (*get_log)(RtcProgram program, char* log) = nullptr;
    RtcResult (*destroy_program)(RtcProgram* program) = nullptr;
    hip::ComgrTargets targets;
    // The state published by the load before this one: every state stays reachable, never freed.
    const HiprtcState* previous = nullptr;
};

std::atomic<const HiprtcState*> g_state{nullptr};

const HiprtcState& state() {
    return *g_state.load(std::memory_order_acquire);
}

// What cudarc keeps per program: its source name (hiprtc 5.x's log names comgr's temporary file
// instead) and a note for the log (why cudarc refused to compile, or why hiprtc's log is empty).
class ProgramInfo {
  public:
    void set_name(RtcProgram program, std::string name) {
        const std::lock_guard lock(mutex_);
        entries_[program].name = std::move(name);
    }
    void set_note(RtcProgram program, std::string note) {
        const std::lock_guard lock(mutex_);
        entries_[program].note = std::move(note);
    }
    void clear_note(RtcProgram program) {
        const std::lock_guard lock(mutex_);
        if (const auto it = entries_.find(program); it != entries_.end()) it->second.note.clear();
    }
    void erase(RtcProgram program) {
        const std::lock_guard lock(mutex_);
        entries_.erase(program);
    }
    [[nodiscard]] std::pair<std::string, std::string> name_and_note(RtcProgram program) const {
        const std::lock_guard lock(mutex_);
        const auto it = entries_.find(program);
        return it != entries_.end() ? std::pair(it->second.name, it->second.note)
                                    : std::pair<std::string, std::string>();
    }

  private:
    struct Entry {
        std::string name;
        std::string note;
    };
    mutable std::mutex mutex_;
    std::unordered_map<RtcProgram, Entry> entries_;
};

ProgramInfo& program_info() {
    // Note: leaked on purpose, so that a program destroyed during static destruction finds it.
    static auto* instance = new ProgramInfo;
    return *instance;
}

// hiprtc 5.x reports diagnostics against comgr's temporary copies of the source and headers
// ("/tmp/comgr-65e9ce/input/CompileSource:2:12: error: ...", "/tmp/comgr-65e9ce/include/x.cuh:3:1");
// name the program's source and the include names instead, as NVRTC does.
std::string with_source_names(std::string log, const std::string& name) {
    constexpr std::string_view kFolder = "comgr-";
    constexpr std::string_view kSource = "/input/CompileSource";
    constexpr std::string_view kInclude = "/include/";
    std::size_t at = 0;
    while ((at = log.find(kFolder, at)) != std::string::npos) {
        std::size_t start = at;
        while (start > 0 && log[start - 1] != '\n' && log[start - 1] != ' ' && log[start - 1] != '\'' &&
               log[start - 1] != '"') {
            --start;
        }
        const std::size_t folder_end = log.find('/', at);
        if (folder_end == std::string::npos) break;
        const std::string_view rest = std::string_view(log).substr(folder_end);
        if (rest.starts_with(kSource) && !name.empty()) {
            log.replace(start, folder_end + kSource.size() - start, name);
            at = start + name.size();
        } else if (rest.starts_with(kInclude)) {
            log.erase(start, folder_end + kInclude.size() - start);
            at = start;
        } else {
            at = folder_end;
        }
    }
    return log;
}

// hiprtc's own log text, without any terminator. hiprtc 5.x neither counts nor writes a NUL, later
// versions may do both: read into a zeroed buffer one longer than announced and cut at the first NUL.
std::string hiprtc_log_text(const HiprtcState& hiprtc, RtcProgram program, RtcResult& result) {
    std::size_t size = 0;
    result = hiprtc.get_log_size(program, &size);
    if (result != kRtcSuccess) return {};
    std::string text(size + 1, '\0');
    if (size > 0) {
        result = hiprtc.get_log(program, text.data());
        if (result != kRtcSuccess) return {};
    }
    text.resize(std::strlen(text.c_str()));
    return text;
}

std::string full_log(RtcProgram program, RtcResult& result) {
    std::string text = hiprtc_log_text(state(), program, result);
    if (result != kRtcSuccess) return {};
    const auto [name, note] = program_info().name_and_note(program);
    text = with_source_names(std::move(text), name);
    if (!note.empty()) {
        if (!text.empty() && text.back() != '\n') text += '\n';
        text += note;
    }
    return text;
}

// The targets named by --offload-arch=X / --gpu-architecture=X (or the option and its value as two).
std::vector<std::string> requested_targets(int num_options, const char* const* options) {
    std::vector<std::string> out;
    constexpr std::string_view kSpellings[] = {"--offload-arch", "--gpu-architecture"};
    for (int i = 0; i < num_options; ++i) {
        const std::string_view option = options[i] != nullptr ? options[i] : "";
        for (const std::string_view spelling : kSpellings) {
            if (!option.starts_with(spelling)) continue;
            const std::string_view rest = option.substr(spelling.size());
            if (rest.starts_with('=')) {
                out.emplace_back(rest.substr(1));
            } else if (rest.empty() && i + 1 < num_options && options[i + 1] != nullptr) {
                out.emplace_back(options[++i]);
            }
        }
    }
    return out;
}

std::string unknown_target_note(const HiprtcState& hiprtc, const std::string& target) {
    std::string note = "cudarc: hiprtc cannot compile for \"" + target +
                       "\": the AMD code object manager it uses (" + hiprtc.targets.library_path() +
                       ") does not know this processor or one of its target features. Processors it knows: " +
                       join_lines(hiprtc.targets.processors(), ", ") +
                       ". Target features are written as in \"gfx90a:sramecc+:xnack-\". (cudarc checks this "
                       "before compiling because this hiprtc aborts the process on an unknown target.)";
    return note;
}

// ---- Adapters ----

RtcResult compile_program(RtcProgram program, int num_options, const char* const* options) {
    const HiprtcState& hiprtc = state();
    program_info().clear_note(program);
    const std::vector<std::string> targets = requested_targets(num_options, options);
    for (const std::string& target : targets) {
        if (hiprtc.targets.accepts(target) == false) {
            program_info().set_note(program, unknown_target_note(hiprtc, target));
            return kRtcErrorInvalidOption;
        }
    }
    const RtcResult result = hiprtc.compile_program(program, num_options, options);
    if (result != kRtcSuccess) {
        RtcResult log_result = kRtcSuccess;
        if (hiprtc_log_text(hiprtc, program, log_result).empty()) {
            const char* name = hiprtc.get_error_string(result);
            std::string note = std::string("cudarc: hiprtcCompileProgram failed with ") +
                               (name != nullptr ? name : "an unknown result") + " and left no log.";
            if (targets.empty()) {
                note +=
                    " No --offload-arch= option was given: hiprtc then compiles for the current AMD GPU, "
                    "and there is none it can use here. Name the target, e.g. --offload-arch=gfx90a.";
            }
            program_info().set_note(program, std::move(note));
        }
    }
    return result;
}

RtcResult get_log_size(RtcProgram program, std::size_t* bytes) {
    RtcResult result = kRtcSuccess;
    const std::string text = full_log(program, result);
    if (result == kRtcSuccess) *bytes = text.size() + 1;
    return result;
}

RtcResult get_log(RtcProgram program, char* log) {
    RtcResult result = kRtcSuccess;
    const std::string text = full_log(program, result);
    if (result == kRtcSuccess) std::memcpy(log, text.c_str(), text.size() + 1);
    return result;
}

RtcResult create_program(RtcProgram* program, const char* source, const char* name, int num_headers,
                         const char* const* headers, const char* const* include_names) {
    const RtcResult result =
        state().create_program(program, source, name, num_headers, headers, include_names);
    if (result == kRtcSuccess && program != nullptr && name != nullptr)
        program_info().set_name(*program, name);
    return result;
}

RtcResult destroy_program(RtcProgram* program) {
    if (program != nullptr) program_info().erase(*program);
    return state().destroy_program(program);
}

// ---- Loading ----

template <typename Fn>
void resolve(const DynamicLibrary& library, Fn& slot, const char* name, std::vector<std::string>& missing) {
    slot = reinterpret_cast<Fn>(library.symbol(name));
    if (slot == nullptr) missing.emplace_back(name);
}

}  // namespace

std::vector<std::string> hiprtc_candidates(const std::string& override_path, const std::string& rocm_path) {
    std::vector<std::string> out;
    auto add_folder = [&out](const std::string& folder) {
        for (const char* soname : kHiprtcSonames) append_unique(out, folder + "/" + soname);
        append_unique(out, folder + "/libhiprtc.so");
        for (const char* soname : kHipSonames) append_unique(out, folder + "/" + soname);
    };
    if (!override_path.empty()) {
        add_overridden_candidates(out, override_path, add_folder);
        return out;
    }
    if (!rocm_path.empty()) add_folder(rocm_path + "/lib");
    for (const char* soname : kHiprtcSonames) {
        append_unique(out, soname);
        append_unique(out, std::string("/opt/rocm/lib/") + soname);
    }
    append_unique(out, "libhiprtc.so");
    // Older ROCm (5.2 and before) has hiprtc inside the HIP runtime itself.
    for (const char* soname : kHipSonames) {
        append_unique(out, soname);
        append_unique(out, std::string("/opt/rocm/lib/") + soname);
    }
    return out;
}

bool load_hiprtc_from(const std::vector<std::string>& candidates, RtcApi& api, std::string& why) {
    std::vector<std::string> attempts;
    const auto use = [&api](const DynamicLibrary& library) -> std::string {
        RtcApi table;
        table.backend = Backend::hip;
        HiprtcState hiprtc;
        std::vector<std::string> missing;
        resolve(library, table.version, "hiprtcVersion", missing);
        resolve(library, hiprtc.get_error_string, "hiprtcGetErrorString", missing);
        resolve(library, hiprtc.create_program, "hiprtcCreateProgram", missing);
        resolve(library, hiprtc.destroy_program, "hiprtcDestroyProgram", missing);
        resolve(library, hiprtc.compile_program, "hiprtcCompileProgram", missing);
        resolve(library, hiprtc.get_log_size, "hiprtcGetProgramLogSize", missing);
        resolve(library, hiprtc.get_log, "hiprtcGetProgramLog", missing);
        resolve(library, table.get_binary_size, "hiprtcGetCodeSize", missing);
        resolve(library, table.get_binary, "hiprtcGetCode", missing);
        resolve(library, table.add_name_expression, "hiprtcAddNameExpression", missing);
        resolve(library, table.get_lowered_name, "hiprtcGetLoweredName", missing);
        if (!missing.empty()) return "holds no hiprtc (lacks " + join_lines(missing, ", ") + ")";
        // hiprtcResult numbers its codes as nvrtcResult does, so the error strings serve as they are.
        table.get_error_string = hiprtc.get_error_string;
        table.create_program = create_program;
        table.compile_program = compile_program;
        table.get_log_size = get_log_size;
        table.get_log = get_log;
        table.destroy_program = destroy_program;
        table.known_targets = hiprtc_known_targets;
        table.library_path = library.resolved_path(reinterpret_cast<void*>(table.version));
        hiprtc.targets =
            hip::ComgrTargets::load(std::filesystem::path(table.library_path).parent_path().string());
        // Note: published once per load and never freed, like the library handle: adapters of every
        // table filled so far stay valid. Each holds the one before, so none is lost (a leak to LSan).
        auto* published = new HiprtcState(std::move(hiprtc));
        published->previous = g_state.load(std::memory_order_relaxed);
        while (!g_state.compare_exchange_weak(published->previous, published, std::memory_order_release,
                                              std::memory_order_relaxed)) {
        }
        api = std::move(table);
        return {};
    };
    // Note [Loading a vendor library]
    if (DynamicLibrary::load_first(candidates, use, attempts)) return true;
    why =
        "hiprtc (libhiprtc.so.7/.6/.5, or libamdhip64 on ROCm 5.2 and older) could not be loaded; tried: " +
        join_lines(attempts, "; ") +
        ". Install ROCm's hiprtc (on Debian 12: libamdhip64-dev and rocm-device-libs), set ROCM_PATH, or set "
        "CUDARC_HIPRTC to the library's path.";
    return false;
}

bool load_hiprtc(RtcApi& api, std::string& why) {
    return load_hiprtc_from(hiprtc_candidates(env_or_empty("CUDARC_HIPRTC"), env_or_empty("ROCM_PATH")), api,
                            why);
}

std::vector<std::string> hiprtc_known_targets() {
    const HiprtcState* hiprtc = g_state.load(std::memory_order_acquire);
    return hiprtc != nullptr ? hiprtc->targets.processors() : std::vector<std::string>{};
}

}  // namespace cudarc::sys
