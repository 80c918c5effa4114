// The NCCL entry points cudarc calls, declared from NCCL's documented API (nccl.h): no NCCL header is
// included and nothing is linked; libnccl is dlopen'ed on first use. Internal to src/: src/nccl reaches
// NCCL only through this table, as core code reaches the driver only through DriverApi.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "sys/driver_api.hpp"

struct ncclComm;  // NCCL's opaque communicator (ncclComm_t is a pointer to it)

namespace cudarc::sys {

using NcclResult = int;  // ncclResult_t
using NcclComm = ::ncclComm*;

// ncclResult_t values.
inline constexpr NcclResult kNcclSuccess = 0;
inline constexpr NcclResult kNcclUnhandledCudaError = 1;
inline constexpr NcclResult kNcclSystemError = 2;
inline constexpr NcclResult kNcclInternalError = 3;
inline constexpr NcclResult kNcclInvalidArgument = 4;
inline constexpr NcclResult kNcclInvalidUsage = 5;
inline constexpr NcclResult kNcclRemoteError = 6;
inline constexpr NcclResult kNcclInProgress = 7;
inline constexpr NcclResult kNcclTimeout = 8;

// "ncclInvalidArgument" for 4; "ncclResult N" for a code this table does not know.
[[nodiscard]] std::string nccl_result_name(NcclResult result);

// ncclUniqueId: NCCL_UNIQUE_ID_BYTES opaque bytes, passed by value to ncclCommInitRank.
inline constexpr std::size_t kNcclUniqueIdBytes = 128;
struct NcclUniqueId {
    char internal[kNcclUniqueIdBytes];
};

// ncclDataType_t values.
namespace nccl_type {
inline constexpr int kInt8 = 0;
inline constexpr int kUint8 = 1;
inline constexpr int kInt32 = 2;
inline constexpr int kUint32 = 3;
inline constexpr int kInt64 = 4;
inline constexpr int kUint64 = 5;
inline constexpr int kFloat16 = 6;
inline constexpr int kFloat32 = 7;
inline constexpr int kFloat64 = 8;
inline constexpr int kBfloat16 = 9;
}  // namespace nccl_type

// ncclRedOp_t values (the built-in operators).
namespace nccl_op {
inline constexpr int kSum = 0;
inline constexpr int kProd = 1;
inline constexpr int kMax = 2;
inline constexpr int kMin = 3;
inline constexpr int kAvg = 4;
}  // namespace nccl_op

// NCCL_VERSION_CODE decoded: 2.8.4 was coded 2804, 2.28.7 is coded 22807.
struct NcclVersion {
    int major = 0;
    int minor = 0;
    int patch = 0;
    friend constexpr auto operator<=>(const NcclVersion&, const NcclVersion&) = default;
};
[[nodiscard]] constexpr NcclVersion decode_nccl_version(int code) noexcept {
    if (code >= 10000) return {code / 10000, (code % 10000) / 100, code % 100};
    return {code / 1000, (code % 1000) / 100, code % 100};
}
// The oldest NCCL cudarc accepts: bf16 and ncclAvg arrived in 2.10.
inline constexpr NcclVersion kMinimumNcclVersion{2, 10, 0};

// Every NCCL function cudarc uses. Enumerations (ncclDataType_t, ncclRedOp_t) travel as int, which is how
// the C ABI passes them. A null member is optional and was not exported by the loaded library.
struct NcclApi {
    std::string library_path;  // the file really loaded
    int version = 0;           // NCCL_VERSION_CODE of the loaded library

    NcclResult (*get_version)(int* version) = nullptr;
    const char* (*get_error_string)(NcclResult result) = nullptr;
    const char* (*get_last_error)(NcclComm comm) = nullptr;  // optional: NCCL >= 2.13
    NcclResult (*get_unique_id)(NcclUniqueId* id) = nullptr;
    NcclResult (*comm_init_rank)(NcclComm* comm, int nranks, NcclUniqueId id, int rank) = nullptr;
    NcclResult (*comm_init_all)(NcclComm* comms, int ndev, const int* devlist) = nullptr;
    NcclResult (*comm_finalize)(NcclComm comm) = nullptr;  // optional: NCCL >= 2.14
    NcclResult (*comm_destroy)(NcclComm comm) = nullptr;
    NcclResult (*comm_abort)(NcclComm comm) = nullptr;
    NcclResult (*comm_get_async_error)(NcclComm comm, NcclResult* async_error) = nullptr;
    NcclResult (*comm_count)(NcclComm comm, int* count) = nullptr;
    NcclResult (*comm_cu_device)(NcclComm comm, int* device) = nullptr;
    NcclResult (*comm_user_rank)(NcclComm comm, int* rank) = nullptr;

    NcclResult (*all_reduce)(const void* send, void* recv, std::size_t count, int type, int op, NcclComm comm,
                             Stream stream) = nullptr;
    NcclResult (*broadcast)(const void* send, void* recv, std::size_t count, int type, int root,
                            NcclComm comm, Stream stream) = nullptr;
    NcclResult (*reduce)(const void* send, void* recv, std::size_t count, int type, int op, int root,
                         NcclComm comm, Stream stream) = nullptr;
    NcclResult (*all_gather)(const void* send, void* recv, std::size_t send_count, int type, NcclComm comm,
                             Stream stream) = nullptr;
    NcclResult (*reduce_scatter)(const void* send, void* recv, std::size_t recv_count, int type, int op,
                                 NcclComm comm, Stream stream) = nullptr;
    NcclResult (*send)(const void* send, std::size_t count, int type, int peer, NcclComm comm,
                       Stream stream) = nullptr;
    NcclResult (*recv)(void* recv, std::size_t count, int type, int peer, NcclComm comm,
                       Stream stream) = nullptr;
    NcclResult (*group_start)() = nullptr;
    NcclResult (*group_end)() = nullptr;
};

// What the search for libnccl depends on. from_process() reads the real environment; tests build their own.
struct NcclSearchEnvironment {
    std::string override_path;                 // CUDARC_NCCL: a file, or a folder holding libnccl
    std::vector<std::string> python_path;      // PYTHONPATH entries: site folders themselves
    std::vector<std::string> python_prefixes;  // VIRTUAL_ENV, CONDA_PREFIX, the user base, /usr/local, /usr
    std::vector<std::string> system_folders;   // /usr/lib/x86_64-linux-gnu, /usr/lib64, ...
    [[nodiscard]] static NcclSearchEnvironment from_process();
};

// Where libnccl is looked for, in order: with an override, only there; else the sonames through the
// dynamic linker, pip's nvidia/nccl/lib in each Python site folder, then the system library folders.
struct NcclSearch {
    std::vector<std::string> candidates;    // sonames and paths, tried in order
    std::vector<std::string> site_folders;  // the Python site folders looked in (for the error message)
};
[[nodiscard]] NcclSearch nccl_search(const NcclSearchEnvironment& environment);

// Loads the first candidate that is a usable NCCL (every required entry point, version >= the minimum).
// On failure `api` is left as it was and `why` lists every place looked at and why each failed.
bool load_nccl_from(const NcclSearch& search, NcclApi& api, std::string& why);

// The process's NCCL, loaded on first use (thread-safe). Throws cudarc::Error saying where it looked.
[[nodiscard]] const NcclApi& nccl();
// The table if NCCL loads, else nullptr (never throws).
[[nodiscard]] const NcclApi* nccl_if_loaded() noexcept;
// Why NCCL could not be loaded (empty when it loaded).
[[nodiscard]] std::string nccl_load_failure();

// Note [NVLink multicast stays off]: sets NCCL_NVLS_ENABLE=0 unless the variable is set already. Called
// before libnccl is loaded, so NCCL (which reads its parameters lazily) never creates multicast objects.
void default_nvls_off() noexcept;

}  // namespace cudarc::sys
