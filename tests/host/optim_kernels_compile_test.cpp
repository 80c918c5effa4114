// The shipped optimizer kernels compile with NVRTC and export exactly the names kernel_abi.hpp spells.
// Needs NVRTC (CI has the CUDA toolkit's), no GPU: it compiles to PTX and reads the entry points.
#include <doctest/doctest.h>

#include <regex>
#include <set>
#include <string>

#include "cudarc/nvrtc.hpp"
#include "optim/kernel_abi.hpp"

namespace {

using cudarc::optim::Algorithm;
using cudarc::optim::DType;
using cudarc::optim::KernelLayout;
using cudarc::optim::KernelPass;
using cudarc::optim::StateFormat;
namespace abi = cudarc::optim::abi;

constexpr Algorithm kAlgorithms[] = {Algorithm::adam, Algorithm::adamw,   Algorithm::sgd,
                                     Algorithm::lion, Algorithm::rmsprop, Algorithm::adagrad};
constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};

bool have_nvrtc() {
    try {
        static_cast<void>(cudarc::compiler_version(cudarc::Backend::cuda));
        return true;
    } catch (const cudarc::Error& e) {
        MESSAGE("NVRTC not available, not compiled: " << e.what());
        return false;
    }
}

// The kernel entry points of a PTX module.
std::set<std::string> entry_points(const std::string& ptx) {
    std::set<std::string> names;
    const std::regex entry(R"(\.entry\s+([A-Za-z_][A-Za-z0-9_]*))");
    for (auto it = std::sregex_iterator(ptx.begin(), ptx.end(), entry); it != std::sregex_iterator(); ++it) {
        names.insert((*it)[1].str());
    }
    return names;
}

std::set<std::string> documented_names(StateFormat format, const Algorithm* algorithms, std::size_t na,
                                       const DType* dtypes, std::size_t nd) {
    std::set<std::string> names;
    for (std::size_t a = 0; a < na; ++a) {
        for (std::size_t d = 0; d < nd; ++d) {
            for (KernelLayout l : {KernelLayout::tensor, KernelLayout::multi_tensor}) {
                for (KernelPass p : {KernelPass::update, KernelPass::update_norm}) {
                    names.insert(abi::kernel_name(algorithms[a], dtypes[d], format, l, p));
                }
            }
        }
    }
    return names;
}

}  // namespace

TEST_CASE("optim.kernels_compile_and_export_every_documented_name") {
    if (!have_nvrtc()) return;
    for (StateFormat format : {StateFormat::fp32, StateFormat::blockwise8}) {
        cudarc::CompileOptions options;
        options.arch = "compute_90";
        const cudarc::CompiledProgram compiled =
            cudarc::compile_embedded(abi::kernel_source(format), options);
        CAPTURE(abi::kernel_source(format));
        CHECK(entry_points(compiled.ptx) == documented_names(format, kAlgorithms, 6, kDTypes, 3));
    }
}

TEST_CASE("optim.kernel_subset_defines_select_one_algorithm_and_dtype") {
    if (!have_nvrtc()) return;
    for (StateFormat format : {StateFormat::fp32, StateFormat::blockwise8}) {
        const Algorithm algorithm = format == StateFormat::fp32 ? Algorithm::lion : Algorithm::adamw;
        const DType dtype = format == StateFormat::fp32 ? DType::f16 : DType::bf16;
        cudarc::CompileOptions options;
        options.arch = "compute_80";
        options.defines = abi::compile_defines(algorithm, dtype);
        const cudarc::CompiledProgram compiled =
            cudarc::compile_embedded(abi::kernel_source(format), options);
        CHECK(entry_points(compiled.ptx) == documented_names(format, &algorithm, 1, &dtype, 1));
    }
}
