/// @file
/// Run-time compilation of kernel sources (NVRTC on CUDA, hiprtc on HIP): Program, its compiled
/// result, and the error a failed compile throws.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "cudarc/compile_options.hpp"
#include "cudarc/error.hpp"
#include "cudarc/export.hpp"

namespace cudarc {

/// The result of one compile. A plain value: copy it, cache it, hand it to a module loader.
struct CUDARC_API CompiledProgram {
    std::string ptx;           ///< set for a virtual arch ("compute_XY"); empty otherwise
    std::vector<char> binary;  ///< CUBIN for "sm_XY", the code object on HIP; empty for PTX
    std::string log;           ///< the compiler's messages (warnings; ptxas' report when asked for)
    /// Name expression -> lowered (mangled) name, for example "scale<float>" -> "_Z5scaleIfEvPT_S0_".
    std::map<std::string, std::string> lowered_names;
    std::string arch;  ///< what it was compiled for
    /// The backend whose compiler made it.
    Backend backend = Backend::cuda;

    /// What image() holds: CodeFormat::amd_code_object on HIP, else cubin when there is a binary, else ptx.
    [[nodiscard]] CodeFormat format() const;
    /// The bytes a module loader takes: the binary, or the PTX (NUL-terminated) when there is none.
    [[nodiscard]] const void* image() const noexcept {
        return binary.empty() ? static_cast<const void*>(ptx.c_str())
                              : static_cast<const void*>(binary.data());
    }
    /// The lowered name of a name expression given to the Program; throws cudarc::Error listing
    /// the known expressions when `expression` is not one of them.
    [[nodiscard]] const std::string& lowered_name(const std::string& expression) const;

    /// Equal when every field is.
    friend bool operator==(const CompiledProgram&, const CompiledProgram&) = default;
};

/// A compile that the compiler (or cudarc, before calling it) rejected. what() holds everything
/// needed to fix it: the source name, the options used and the compiler's full log.
class CUDARC_API CompileError : public Error {
  public:
    /// A rejected compile of `source_name` with `options`; what() is built from them, the compiler's `log`
    /// and `reason`.
    CompileError(std::string source_name, std::vector<std::string> options, std::string log,
                 const std::string& reason);

    /// The name the compiler's messages used for the source.
    [[nodiscard]] const std::string& source_name() const noexcept { return source_name_; }
    /// The compiler options of the compile.
    [[nodiscard]] const std::vector<std::string>& options() const noexcept { return options_; }
    /// The compiler's full log (empty when cudarc rejected the compile before calling it).
    [[nodiscard]] const std::string& log() const noexcept { return log_; }

  private:
    std::string source_name_;
    std::vector<std::string> options_;
    std::string log_;
};

/// A kernel source: its text, the name the compiler's messages use for it, and the name
/// expressions (templates to instantiate, for example "adamw<float, float>") whose lowered names are wanted.
class CUDARC_API Program {
  public:
    /// A program from source text; `name` is what the compiler's messages call it ("program.cu" when empty).
    Program(std::string source, std::string name);

    /// A file shipped under kernels/ and embedded into the library, for example "bench.cu". Throws
    /// cudarc::Error listing the embedded files when there is no such file.
    [[nodiscard]] static Program embedded(std::string_view file_name);

    /// Adds a name expression (a duplicate is ignored). Returns *this for chaining.
    Program& add_name_expression(std::string expression);

    /// The source text.
    [[nodiscard]] const std::string& source() const noexcept { return source_; }
    /// The source's name.
    [[nodiscard]] const std::string& name() const noexcept { return name_; }
    /// The name expressions added so far, in order.
    [[nodiscard]] const std::vector<std::string>& name_expressions() const noexcept {
        return name_expressions_;
    }

    /// Compiles now (no cache; see kernel_cache.hpp for the cached path). Throws CompileError when
    /// the source or the options are rejected, cudarc::Error when no compiler can be loaded.
    [[nodiscard]] CompiledProgram compile(const CompileOptions& options) const;

  private:
    std::string source_;
    std::string name_;
    std::vector<std::string> name_expressions_;
};

/// Compiles a file shipped under kernels/, for example compile_embedded("bench.cu", options).
[[nodiscard]] CUDARC_API CompiledProgram
compile_embedded(std::string_view file_name, const CompileOptions& options,
                 const std::vector<std::string>& name_expressions = {});

/// The names of every file under kernels/ embedded into the library (*.cu and *.cuh).
[[nodiscard]] CUDARC_API std::vector<std::string> embedded_kernel_files();

/// The run-time compiler of a backend, loaded on first use.
struct CompilerVersion {
    /// The backend.
    Backend backend = Backend::cuda;
    /// The compiler's major version.
    int major = 0;
    /// The compiler's minor version.
    int minor = 0;
    std::string library_path;  ///< the file it was loaded from
};
/// The run-time compiler of `backend`: loads it on first use (throws cudarc::Error when it cannot be loaded
/// or nvrtcVersion fails).
[[nodiscard]] CUDARC_API CompilerVersion compiler_version(Backend backend = Backend::cuda);

/// The real architectures the loaded compiler can target, for example {"sm_75", "sm_80", ..., "sm_90", ...},
/// or on HIP the gfx targets hiprtc's code object manager knows; empty when NVRTC cannot tell (before 11.2).
[[nodiscard]] CUDARC_API std::vector<std::string> supported_architectures(Backend backend = Backend::cuda);

}  // namespace cudarc
