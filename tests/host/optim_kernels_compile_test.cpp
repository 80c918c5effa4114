// The shipped optimizer kernels compile with NVRTC (and hiprtc) and every name expression kernel_abi.hpp
// spells yields exactly one kernel. Needs NVRTC (CI has the CUDA toolkit's) or hiprtc, no GPU: NVRTC
// compiles to PTX, whose entry points are read back.
#include <doctest/doctest.h>

#include <algorithm>
#include <iterator>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "cudarc/nvrtc.hpp"
#include "hip_test_support.hpp"
#include "optim/kernel_abi.hpp"

namespace {

using cudarc::optim::ElementType;
using cudarc::optim::StatePrecision;
using cudarc::optim::UpdateRule;
namespace abi = cudarc::optim::abi;

constexpr UpdateRule kRules[] = {UpdateRule::adam,     UpdateRule::adamw,   UpdateRule::sgd,
                                 UpdateRule::lion,     UpdateRule::rmsprop, UpdateRule::adagrad,
                                 UpdateRule::ademamix, UpdateRule::lamb,    UpdateRule::lars};
constexpr ElementType kTypes[] = {ElementType::fp32, ElementType::fp16, ElementType::bf16};

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

// Every name expression of `precision`'s kernels (all rules and element types), of ordinary or of
// capturable optimizers (store_step once per rule).
std::vector<std::string> documented_names(StatePrecision precision, bool capturable = false) {
    std::vector<std::string> names;
    for (const UpdateRule rule : kRules) {
        if (!cudarc::optim::supports(rule, precision)) continue;  // (LAMB and LARS: 32-bit state only)
        for (const ElementType type : kTypes) {
            for (const std::string& name : abi::kernel_names(rule, type, precision, capturable)) {
                if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
            }
        }
    }
    return names;
}

// The symbols the expressions were lowered to; FAILs for an expression that has none.
std::set<std::string> lowered(const cudarc::CompiledProgram& compiled,
                              const std::vector<std::string>& names) {
    std::set<std::string> symbols;
    for (const std::string& name : names) {
        CAPTURE(name);
        const auto found = compiled.lowered_names.find(name);
        REQUIRE(found != compiled.lowered_names.end());
        symbols.insert(found->second);
    }
    return symbols;
}

}  // namespace

TEST_CASE("optim.kernels_compile_and_export_every_documented_name") {
    if (!have_nvrtc()) return;
    for (StatePrecision precision : {StatePrecision::fp32, StatePrecision::blockwise8}) {
        CAPTURE(cudarc::optim::to_string(precision));
        const std::vector<std::string> names = documented_names(precision);
        // Every rule of this precision (9 with fp32 state, 7 with 8-bit), 3 element types, 2 layouts, 2
        // passes.
        CHECK(names.size() == (precision == StatePrecision::fp32 ? 9u : 7u) * 12u);
        cudarc::CompileOptions options;
        options.arch = "compute_90";
        const cudarc::CompiledProgram compiled =
            cudarc::compile_embedded(std::string(abi::kKernelSource), options, names);
        const std::set<std::string> symbols = lowered(compiled, names);
        CHECK(symbols.size() == names.size());
        CHECK(entry_points(compiled.ptx) == symbols);
    }
}

TEST_CASE("optim.capturable_kernels_compile_and_export_every_documented_name") {
    if (!have_nvrtc()) return;
    for (StatePrecision precision : {StatePrecision::fp32, StatePrecision::blockwise8}) {
        CAPTURE(cudarc::optim::to_string(precision));
        const std::vector<std::string> names = documented_names(precision, true);
        // Two passes of the capturable layout per rule and element type, and store_step per rule.
        CHECK(names.size() == (precision == StatePrecision::fp32 ? 9u : 7u) * (2 * std::size(kTypes) + 1));
        cudarc::CompileOptions options;
        options.arch = "compute_90";
        const cudarc::CompiledProgram compiled =
            cudarc::compile_embedded(std::string(abi::kKernelSource), options, names);
        const std::set<std::string> symbols = lowered(compiled, names);
        CHECK(symbols.size() == names.size());
        CHECK(entry_points(compiled.ptx) == symbols);
    }
}

TEST_CASE("optim.kernel_names_of_one_rule_type_and_precision_select_its_4_kernels") {
    if (!have_nvrtc()) return;
    for (StatePrecision precision : {StatePrecision::fp32, StatePrecision::blockwise8}) {
        const UpdateRule rule = precision == StatePrecision::fp32 ? UpdateRule::lion : UpdateRule::adamw;
        const ElementType type = precision == StatePrecision::fp32 ? ElementType::fp16 : ElementType::bf16;
        cudarc::CompileOptions options;
        options.arch = "compute_80";
        const std::vector<std::string> names = abi::kernel_names(rule, type, precision);
        const cudarc::CompiledProgram compiled =
            cudarc::compile_embedded(std::string(abi::kKernelSource), options, names);
        CHECK(entry_points(compiled.ptx) == lowered(compiled, names));
    }
}

// Note: without name expressions the source instantiates no kernel, so the hip.* test that compiles
// every shipped file does not reach these; this one does.
TEST_CASE("hip.hiprtc_compiles_every_optimizer_kernel") {
    if (hip_test::skipped_by_request()) return;
    for (StatePrecision precision : {StatePrecision::fp32, StatePrecision::blockwise8}) {
        CAPTURE(cudarc::optim::to_string(precision));
        // The capturable entries of one element type: their own code (the step state, the derivation in
        // double) does not depend on it, and every element type's bodies are compiled above.
        std::vector<std::string> names = documented_names(precision);
        for (const std::string& name : documented_names(precision, true)) {
            static const std::regex other_type(R"(multi_step_capturable<\d+, [12], )");
            if (!std::regex_search(name, other_type)) names.push_back(name);
        }
        cudarc::CompileOptions options;
        options.backend = cudarc::Backend::hip;
        options.arch = "gfx90a";
        const cudarc::CompiledProgram compiled =
            cudarc::compile_embedded(std::string(abi::kKernelSource), options, names);
        CHECK(compiled.format() == cudarc::CodeFormat::amd_code_object);
        // Each lowered name is a kernel symbol of the code object, as hipModuleGetFunction looks it up.
        for (const std::string& symbol : lowered(compiled, names)) {
            CAPTURE(symbol);
            CHECK(std::search(compiled.binary.begin(), compiled.binary.end(), symbol.begin(), symbol.end()) !=
                  compiled.binary.end());
        }
    }
}
