// Fills the DriverApi table from libcuda at run time.
#include <cstdint>
#include <string>
#include <vector>

#include "sys/backends.hpp"
#include "sys/dynamic_library.hpp"

namespace cudarc::sys {
namespace {

// The CUDA version this code was written against. cuGetProcAddress returns, for each base name,
// the entry point with that version's ABI (e.g. "cuMemAlloc" -> cuMemAlloc_v2).
constexpr int kApiVersion = 12000;

using GetProcAddressV2 = Result (*)(const char*, void**, int, std::uint64_t, int*);
using GetProcAddressV1 = Result (*)(const char*, void**, int, std::uint64_t);

std::vector<std::string> driver_candidates() {
    std::vector<std::string> out;
    const std::string override_path = env_or_empty("CUDARC_CUDA_DRIVER");
    if (!override_path.empty()) return {override_path};  // an override is taken as the only choice
    out.emplace_back("libcuda.so.1");
    for (const char* dir : {"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu",
                            "/usr/local/nvidia/lib64", "/usr/lib/wsl/lib"}) {
        out.push_back(std::string(dir) + "/libcuda.so.1");
    }
    return out;
}

class Resolver {
  public:
    explicit Resolver(const DynamicLibrary& library) : library_(library) {
        v2_ = reinterpret_cast<GetProcAddressV2>(library.symbol("cuGetProcAddress_v2"));
        if (v2_ == nullptr) v1_ = reinterpret_cast<GetProcAddressV1>(library.symbol("cuGetProcAddress"));
    }
    [[nodiscard]] bool usable() const { return v2_ != nullptr || v1_ != nullptr; }

    // `version`: the CUDA version whose ABI the slot expects; entry points newer than kApiVersion must
    // name the version that introduced them (the driver refuses a request for an older one).
    template <typename Fn>
    void operator()(Fn& slot, const char* name, bool required = true, int version = kApiVersion) {
        void* pfn = nullptr;
        Result result = kErrorNotFound;
        if (v2_ != nullptr) {
            int status = 0;
            result = v2_(name, &pfn, version, 0, &status);
        } else if (v1_ != nullptr) {
            result = v1_(name, &pfn, version, 0);
        }
        if (result != kSuccess) pfn = nullptr;
        slot = reinterpret_cast<Fn>(pfn);
        if (slot == nullptr && required) missing_.emplace_back(name);
    }
    [[nodiscard]] const std::vector<std::string>& missing() const { return missing_; }

  private:
    const DynamicLibrary& library_;
    GetProcAddressV2 v2_ = nullptr;
    GetProcAddressV1 v1_ = nullptr;
    std::vector<std::string> missing_;
};

}  // namespace

bool load_cuda_driver(DriverApi& api, std::string& why) {
    std::vector<std::string> attempts;
    // Note: DynamicLibrary never dlcloses, so the resolved entry points stay valid after it goes out of
    // scope.
    const DynamicLibrary library = DynamicLibrary::open_first(driver_candidates(), attempts);
    if (!library.loaded()) {
        why = "the CUDA driver (libcuda.so.1) could not be loaded; tried: " + join_lines(attempts, "; ") +
              ". Install the NVIDIA driver, or set CUDARC_CUDA_DRIVER to the library's path.";
        return false;
    }
    Resolver resolve(library);
    if (!resolve.usable()) {
        why = library.path() + " has no cuGetProcAddress: the driver is older than CUDA 11.3";
        return false;
    }
    api = DriverApi{};
    api.backend = Backend::cuda;
    resolve(api.init, "cuInit");
    resolve(api.driver_get_version, "cuDriverGetVersion");
    resolve(api.get_error_name, "cuGetErrorName");
    resolve(api.get_error_string, "cuGetErrorString");
    resolve(api.device_get_count, "cuDeviceGetCount");
    resolve(api.device_get, "cuDeviceGet");
    resolve(api.device_get_name, "cuDeviceGetName");
    resolve(api.device_get_uuid, "cuDeviceGetUuid");
    resolve(api.device_total_mem, "cuDeviceTotalMem");
    resolve(api.device_get_attribute, "cuDeviceGetAttribute");
    resolve(api.device_get_pci_bus_id, "cuDeviceGetPCIBusId");
    resolve(api.device_primary_ctx_retain, "cuDevicePrimaryCtxRetain");
    resolve(api.device_primary_ctx_release, "cuDevicePrimaryCtxRelease");
    resolve(api.device_can_access_peer, "cuDeviceCanAccessPeer");
    resolve(api.ctx_get_current, "cuCtxGetCurrent");
    resolve(api.ctx_set_current, "cuCtxSetCurrent");
    resolve(api.ctx_synchronize, "cuCtxSynchronize");
    resolve(api.ctx_get_stream_priority_range, "cuCtxGetStreamPriorityRange");
    resolve(api.mem_get_info, "cuMemGetInfo");
    resolve(api.ctx_enable_peer_access, "cuCtxEnablePeerAccess");
    resolve(api.stream_create_with_priority, "cuStreamCreateWithPriority");
    resolve(api.stream_destroy, "cuStreamDestroy");
    resolve(api.stream_synchronize, "cuStreamSynchronize");
    resolve(api.stream_query, "cuStreamQuery");
    resolve(api.stream_wait_event, "cuStreamWaitEvent");
    resolve(api.stream_get_priority, "cuStreamGetPriority");
    resolve(api.stream_get_flags, "cuStreamGetFlags");
    resolve(api.stream_get_ctx, "cuStreamGetCtx");
    resolve(api.stream_is_capturing, "cuStreamIsCapturing");
    resolve(api.stream_begin_capture, "cuStreamBeginCapture");
    resolve(api.stream_end_capture, "cuStreamEndCapture");
    resolve(api.event_create, "cuEventCreate");
    resolve(api.event_destroy, "cuEventDestroy");
    resolve(api.event_record, "cuEventRecord");
    resolve(api.event_query, "cuEventQuery");
    resolve(api.event_synchronize, "cuEventSynchronize");
    resolve(api.event_elapsed_time, "cuEventElapsedTime");
    resolve(api.mem_alloc, "cuMemAlloc");
    resolve(api.mem_free, "cuMemFree");
    resolve(api.mem_alloc_async, "cuMemAllocAsync", false);
    resolve(api.mem_free_async, "cuMemFreeAsync", false);
    resolve(api.device_get_default_mem_pool, "cuDeviceGetDefaultMemPool", false);
    resolve(api.mem_pool_set_attribute, "cuMemPoolSetAttribute", false);
    resolve(api.mem_pool_trim_to, "cuMemPoolTrimTo", false);
    resolve(api.mem_pool_get_attribute, "cuMemPoolGetAttribute", false);
    resolve(api.mem_alloc_managed, "cuMemAllocManaged", false);
    resolve(api.mem_prefetch_async, "cuMemPrefetchAsync", false);
    resolve(api.mem_host_alloc, "cuMemHostAlloc");
    resolve(api.mem_free_host, "cuMemFreeHost");
    resolve(api.memcpy_htod_async, "cuMemcpyHtoDAsync");
    resolve(api.memcpy_dtoh_async, "cuMemcpyDtoHAsync");
    resolve(api.memcpy_dtod_async, "cuMemcpyDtoDAsync");
    resolve(api.memcpy_peer_async, "cuMemcpyPeerAsync");
    resolve(api.memset_d8_async, "cuMemsetD8Async");
    resolve(api.memset_d32_async, "cuMemsetD32Async");
    resolve(api.pointer_get_attributes, "cuPointerGetAttributes", false);
    resolve(api.mem_get_address_range, "cuMemGetAddressRange", false);
    // cuModuleLoadData has the signature the table wants; options go through NVRTC instead.
    resolve(api.module_load_data, "cuModuleLoadData");
    resolve(api.module_unload, "cuModuleUnload");
    resolve(api.module_get_function, "cuModuleGetFunction");
    resolve(api.module_get_global, "cuModuleGetGlobal");
    resolve(api.func_get_attribute, "cuFuncGetAttribute");
    resolve(api.func_set_attribute, "cuFuncSetAttribute");
    resolve(api.func_get_param_info, "cuFuncGetParamInfo", false, 12040);  // new in CUDA 12.4
    resolve(api.launch_kernel, "cuLaunchKernel");
    resolve(api.launch_kernel_ex, "cuLaunchKernelEx", false);
    resolve(api.launch_cooperative_kernel, "cuLaunchCooperativeKernel", false);
    resolve(api.occupancy_max_active_blocks_per_multiprocessor,
            "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    resolve(api.graph_instantiate, "cuGraphInstantiateWithFlags", false);
    resolve(api.graph_launch, "cuGraphLaunch", false);
    resolve(api.graph_destroy, "cuGraphDestroy", false);
    resolve(api.graph_exec_destroy, "cuGraphExecDestroy", false);
    resolve(api.graph_exec_update, "cuGraphExecUpdate", false);  // the CUDA 12 form, through API 12000
    resolve(api.graph_upload, "cuGraphUpload", false);
    if (!resolve.missing().empty()) {
        why = library.path() + " lacks required entry points: " + join_lines(resolve.missing(), ", ");
        return false;
    }
    const Result init = api.init(0);
    if (init != kSuccess) {
        why = make_error(api, "cuInit", init, -1).what();
        why += " (driver loaded from " + library.path() + ")";
        return false;
    }
    return true;
}

}  // namespace cudarc::sys
