// A stand-in for libnccl that the loader tests load: it exports NCCL's entry points (a version chosen at
// build time, optionally without ncclSend) and does nothing else. No GPU, no NCCL needed.
#include <cstddef>

#ifndef FAKE_NCCL_VERSION
#define FAKE_NCCL_VERSION 22807  // 2.28.7
#endif

extern "C" {

struct ncclComm;
struct FakeUniqueId {
    char internal[128];
};

// Every call "fails" with ncclInvalidUsage (5): nothing may rely on this library doing anything.
constexpr int kInvalidUsage = 5;

__attribute__((visibility("default"))) int ncclGetVersion(int* version) {
    *version = FAKE_NCCL_VERSION;
    return 0;
}
__attribute__((visibility("default"))) const char* ncclGetErrorString(int result) {
    return result == 4 ? "fake: invalid argument" : "fake: some error";
}
__attribute__((visibility("default"))) const char* ncclGetLastError(ncclComm*) {
    return "fake: last error";
}
__attribute__((visibility("default"))) int ncclGetUniqueId(FakeUniqueId*) {
    return kInvalidUsage;
}
__attribute__((visibility("default"))) int ncclCommInitRank(ncclComm**, int, FakeUniqueId, int) {
    return kInvalidUsage;
}
__attribute__((visibility("default"))) int ncclCommInitAll(ncclComm**, int, const int*) {
    return kInvalidUsage;
}
__attribute__((visibility("default"))) int ncclCommFinalize(ncclComm*) {
    return kInvalidUsage;
}
__attribute__((visibility("default"))) int ncclCommDestroy(ncclComm*) {
    return kInvalidUsage;
}
__attribute__((visibility("default"))) int ncclCommAbort(ncclComm*) {
    return kInvalidUsage;
}
__attribute__((visibility("default"))) int ncclCommGetAsyncError(ncclComm*, int*) {
    return kInvalidUsage;
}
__attribute__((visibility("default"))) int ncclCommCount(ncclComm*, int*) {
    return kInvalidUsage;
}
__attribute__((visibility("default"))) int ncclCommCuDevice(ncclComm*, int*) {
    return kInvalidUsage;
}
__attribute__((visibility("default"))) int ncclCommUserRank(ncclComm*, int*) {
    return kInvalidUsage;
}
__attribute__((visibility("default"))) int ncclAllReduce(const void*, void*, std::size_t, int, int, ncclComm*,
                                                         void*) {
    return kInvalidUsage;
}
__attribute__((visibility("default"))) int ncclBroadcast(const void*, void*, std::size_t, int, int, ncclComm*,
                                                         void*) {
    return kInvalidUsage;
}
__attribute__((visibility("default"))) int ncclReduce(const void*, void*, std::size_t, int, int, int,
                                                      ncclComm*, void*) {
    return kInvalidUsage;
}
__attribute__((visibility("default"))) int ncclAllGather(const void*, void*, std::size_t, int, ncclComm*,
                                                         void*) {
    return kInvalidUsage;
}
__attribute__((visibility("default"))) int ncclReduceScatter(const void*, void*, std::size_t, int, int,
                                                             ncclComm*, void*) {
    return kInvalidUsage;
}
#ifndef FAKE_NCCL_WITHOUT_SEND
__attribute__((visibility("default"))) int ncclSend(const void*, std::size_t, int, int, ncclComm*, void*) {
    return kInvalidUsage;
}
#endif
__attribute__((visibility("default"))) int ncclRecv(void*, std::size_t, int, int, ncclComm*, void*) {
    return kInvalidUsage;
}
__attribute__((visibility("default"))) int ncclGroupStart() {
    return 0;
}
__attribute__((visibility("default"))) int ncclGroupEnd() {
    return 0;
}

}  // extern "C"
