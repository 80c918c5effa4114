/// @file
/// cudarc/fmt.hpp — fmt::formatter specializations for cudarc's public value types. Opt-in: not part of
/// cudarc.hpp, and the program that includes it links fmt itself (the library only uses fmt privately).
///
/// @code
///     fmt::print("{} on sm {} ({}), driver {}\n", device.name(), device.compute_capability(),
///                device.memory_info(), cudarc::DriverVersion{cudarc::Device::driver_version()});
///     // "NVIDIA H200 on sm 9.0 (139.2 GiB free of 139.8 GiB), driver 13.0"
/// @endcode
///
/// Enumerations format as their names and take string specs ("{:>8}"); the structures take "{}" only.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>

#include "cudarc/allocator.hpp"
#include "cudarc/counters.hpp"
#include "cudarc/device.hpp"
#include "cudarc/error.hpp"
#include "cudarc/launch_config.hpp"
#include "cudarc/optim/element_type.hpp"
#include "cudarc/optim/options.hpp"
#include "cudarc/version.hpp"

namespace cudarc {

/// Device::driver_version()'s number (1000 * major + 10 * minor, for example 13000), to be formatted as
/// "13.0".
struct DriverVersion {
    int encoded = 0;  ///< the number as the driver reports it
};

namespace detail {

/// A byte count with a binary unit: "512 B", "64.0 KiB", "1.50 GiB".
struct ByteCount {
    std::size_t bytes = 0;
};

/// Formatters of structures accept only an empty spec: "{}".
struct PlainFormatter {
    constexpr auto parse(fmt::format_parse_context& ctx) -> decltype(ctx.begin()) {
        auto it = ctx.begin();
        if (it != ctx.end() && *it != '}')
            throw fmt::format_error("cudarc types take no format spec: use {}");
        return it;
    }
};

/// Enumerations format as their names, through fmt's string_view formatter (so "{:>10}" works).
template <typename Enum>
struct NamedFormatter : fmt::formatter<std::string_view> {
    template <typename FormatContext>
    auto format(Enum value, FormatContext& ctx) const -> decltype(ctx.out()) {
        using cudarc::to_string;
        using cudarc::optim::to_string;
        return fmt::formatter<std::string_view>::format(std::string_view(to_string(value)), ctx);
    }
};

}  // namespace detail
}  // namespace cudarc

/// \namespace fmt
/// @brief The fmt library's namespace: cudarc/fmt.hpp adds fmt::formatter specializations to it.

/// @cond INTERNAL
template <>
struct fmt::formatter<cudarc::detail::ByteCount> : cudarc::detail::PlainFormatter {
    template <typename FormatContext>
    auto format(cudarc::detail::ByteCount count, FormatContext& ctx) const -> decltype(ctx.out()) {
        constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
        if (count.bytes < 1024) return fmt::format_to(ctx.out(), "{} B", count.bytes);
        double value = static_cast<double>(count.bytes) / 1024.0;
        std::size_t unit = 0;
        while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
            value /= 1024.0;
            ++unit;
        }
        return fmt::format_to(ctx.out(), "{:.{}f} {}", value, value < 10.0 ? 2 : 1, kUnits[unit]);
    }
};
/// @endcond

/// "9.0"
template <>
struct fmt::formatter<cudarc::ComputeCapability> : cudarc::detail::PlainFormatter {
    /// Writes the value in the form shown above.
    template <typename FormatContext>
    auto format(const cudarc::ComputeCapability& cc, FormatContext& ctx) const -> decltype(ctx.out()) {
        return fmt::format_to(ctx.out(), "{}.{}", cc.major, cc.minor);
    }
};

/// "13.0"
template <>
struct fmt::formatter<cudarc::DriverVersion> : cudarc::detail::PlainFormatter {
    /// Writes the value in the form shown above.
    template <typename FormatContext>
    auto format(cudarc::DriverVersion version, FormatContext& ctx) const -> decltype(ctx.out()) {
        return fmt::format_to(ctx.out(), "{}.{}", version.encoded / 1000, (version.encoded % 1000) / 10);
    }
};

/// "0.1.0"
template <>
struct fmt::formatter<cudarc::Version> : cudarc::detail::PlainFormatter {
    /// Writes the value in the form shown above.
    template <typename FormatContext>
    auto format(const cudarc::Version& version, FormatContext& ctx) const -> decltype(ctx.out()) {
        return fmt::format_to(ctx.out(), "{}.{}.{}", version.major, version.minor, version.patch);
    }
};

/// "(1024, 1, 1)"
template <>
struct fmt::formatter<cudarc::Dim3> : cudarc::detail::PlainFormatter {
    /// Writes the value in the form shown above.
    template <typename FormatContext>
    auto format(const cudarc::Dim3& d, FormatContext& ctx) const -> decltype(ctx.out()) {
        return fmt::format_to(ctx.out(), "({}, {}, {})", d.x, d.y, d.z);
    }
};

/// "grid (1024, 1, 1), block (256, 1, 1), 0 B dynamic shared memory[, cluster (2, 1, 1)][, cooperative]
/// [, programmatic serialization]"
template <>
struct fmt::formatter<cudarc::LaunchConfig> : cudarc::detail::PlainFormatter {
    /// Writes the value in the form shown above.
    template <typename FormatContext>
    auto format(const cudarc::LaunchConfig& c, FormatContext& ctx) const -> decltype(ctx.out()) {
        auto out = fmt::format_to(ctx.out(), "grid {}, block {}, {} dynamic shared memory", c.grid, c.block,
                                  cudarc::detail::ByteCount{c.shared_mem_bytes});
        if (c.cluster) out = fmt::format_to(out, ", cluster {}", *c.cluster);
        if (c.cooperative == cudarc::Cooperative::yes) out = fmt::format_to(out, ", cooperative");
        if (c.serialization == cudarc::StreamSerialization::programmatic)
            out = fmt::format_to(out, ", programmatic serialization");
        return out;
    }
};

/// "139.2 GiB free of 139.8 GiB"
template <>
struct fmt::formatter<cudarc::MemoryInfo> : cudarc::detail::PlainFormatter {
    /// Writes the value in the form shown above.
    template <typename FormatContext>
    auto format(const cudarc::MemoryInfo& m, FormatContext& ctx) const -> decltype(ctx.out()) {
        return fmt::format_to(ctx.out(), "{} free of {}", cudarc::detail::ByteCount{m.free},
                              cudarc::detail::ByteCount{m.total});
    }
};

/// Every counter by name: "host synchronizations 1 (stream 1, event 0, context 0), blocking copies 0, ..."
template <>
struct fmt::formatter<cudarc::Counters> : cudarc::detail::PlainFormatter {
    /// Writes the value in the form shown above.
    template <typename FormatContext>
    auto format(const cudarc::Counters& c, FormatContext& ctx) const -> decltype(ctx.out()) {
        return fmt::format_to(
            ctx.out(),
            "host synchronizations {} (stream {}, event {}, context {}), blocking copies {}, "
            "cross-stream waits {}, events recorded {}, driver allocations {}, driver frees "
            "{}, kernel launches {}",
            c.host_synchronizations(), c.stream_synchronizes, c.event_synchronizes, c.context_synchronizes,
            c.blocking_copies, c.cross_stream_waits, c.events_recorded, c.driver_allocations, c.driver_frees,
            c.kernel_launches);
    }
};

/// Bytes with units, then the counts: "allocated 1.00 MiB (peak 3.00 MiB), active ..., reserved ..."
template <>
struct fmt::formatter<cudarc::AllocatorStats> : cudarc::detail::PlainFormatter {
    /// Writes the value in the form shown above.
    template <typename FormatContext>
    auto format(const cudarc::AllocatorStats& s, FormatContext& ctx) const -> decltype(ctx.out()) {
        using cudarc::detail::ByteCount;
        auto out = fmt::format_to(
            ctx.out(),
            "allocated {} (peak {}), active {}, reserved {} (peak {}), {} live allocations, {} segments; "
            "cache hits {}, cache misses {}, driver allocations {}, driver frees {}, OOM retries {}, "
            "OOM errors {}, event synchronizations {}",
            ByteCount{s.allocated_bytes}, ByteCount{s.peak_allocated_bytes}, ByteCount{s.active_bytes},
            ByteCount{s.reserved_bytes}, ByteCount{s.peak_reserved_bytes}, s.live_allocations, s.segments,
            s.cache_hits, s.cache_misses, s.driver_allocations, s.driver_frees, s.oom_retries,
            s.out_of_memory_errors, s.event_synchronizations);
        if (s.address_space_bytes != 0)
            out = fmt::format_to(out, "; address space {}", ByteCount{s.address_space_bytes});
        return out;
    }
};

/// A Backend as its name (to_string), with string specs such as "{:>8}".
template <>
struct fmt::formatter<cudarc::Backend> : cudarc::detail::NamedFormatter<cudarc::Backend> {};
/// A MemorySource as its name (to_string), with string specs such as "{:>8}".
template <>
struct fmt::formatter<cudarc::MemorySource> : cudarc::detail::NamedFormatter<cudarc::MemorySource> {};
/// An optim::ElementType as its name (to_string), with string specs such as "{:>8}".
template <>
struct fmt::formatter<cudarc::optim::ElementType>
    : cudarc::detail::NamedFormatter<cudarc::optim::ElementType> {};
/// An optim::UpdateRule as its name (to_string), with string specs such as "{:>8}".
template <>
struct fmt::formatter<cudarc::optim::UpdateRule> : cudarc::detail::NamedFormatter<cudarc::optim::UpdateRule> {
};
/// An optim::StatePrecision as its name (to_string), with string specs such as "{:>8}".
template <>
struct fmt::formatter<cudarc::optim::StatePrecision>
    : cudarc::detail::NamedFormatter<cudarc::optim::StatePrecision> {};
