// Hazard tracking held against a brute-force happens-before model (tests/host/tracking_model.hpp) over
// random programs on the fake driver: launches, copies and memsets over random ranges of random buffers on
// random streams, indirect accesses, forks and joins, frees and reallocations, held streams, borrowed and
// DLPack memory of a "framework" with its own stream, a wrapped foreign stream retired and wrapped again,
// and captures replayed on random streams. Every conflicting pair must be ordered, nothing may be released
// under a use, and no operation may enqueue more waits than it has distinct source streams.
//
// CUDARC_MODEL_SEED=N runs the program of seed N alone (a failure prints its seed); CUDARC_MODEL_PROGRAMS
// and CUDARC_MODEL_OPERATIONS size the run (default 25 programs of 4000 operations).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cudarc/cudarc.hpp"
#include "cudarc/dlpack.hpp"
#include "fake_driver/fake_driver.hpp"
#include "fake_driver/fault_injector.hpp"
#include "tracking_model.hpp"

using namespace cudarc;
namespace model = cudarc::test::model;

namespace {

constexpr const char* kPtx =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry rw(.param .u64 a, .param .u64 b) { ret; }\n"
    ".visible .entry raw(.param .u64 p) { ret; }\n";
constexpr std::size_t kIntsPerUnit = model::kUnit / sizeof(int);

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
    const char* value = std::getenv(name);
    return value != nullptr ? std::strtoull(value, nullptr, 10) : fallback;
}

// The state the deleter of an imported DLPack tensor checks when it runs.
struct DlpackWatch {
    model::HappensBefore* hb = nullptr;
    model::AccessModel* model = nullptr;
    DevicePtr address = 0;
    std::size_t bytes = 0;
    int owner = -1;           // the framework's stream, whose own work the deleter need not follow
    std::uint64_t since = 0;  // the model's sequence at the import: earlier uses were handed back already
    bool released = false;
    std::string problem;
};

struct Program {
    Program(std::uint64_t seed, model::HappensBefore& order, fake::FakeDriver& fake)
        : rng(static_cast<std::mt19937_64::result_type>(seed)), hb(order), driver(fake) {}

    std::mt19937_64 rng;
    model::HappensBefore& hb;
    fake::FakeDriver& driver;
    model::AccessModel accesses;
    std::string problem;
    std::size_t operations = 0;

    [[nodiscard]] std::size_t pick(std::size_t n) { return static_cast<std::size_t>(rng() % n); }
    [[nodiscard]] bool chance(int percent) { return static_cast<int>(rng() % 100) < percent; }

    void fail(const std::string& what) {
        if (problem.empty()) problem = fmt::format("operation {}: {}", operations, what);
    }
    // Checks the accesses of the operation just enqueued on `stream` (its last work) and the waits it made.
    void check(Stream& stream, const std::vector<model::Access>& list, std::uint64_t waits_before) {
        const model::Work work = hb.last_work(stream.native());
        if (work.tick == 0) return fail("an operation enqueued no work");
        std::size_t sources = 0;
        if (env_number("CUDARC_MODEL_TRACE", 0) != 0) {
            for (const auto& a : list)
                fmt::print("  stream {} tick {}: {:#x}+{} {}\n", work.stream, work.tick, a.address, a.bytes,
                           a.write ? "write" : "read");
        }
        const std::string conflict = accesses.access(work, list, &sources);
        if (!conflict.empty()) fail(conflict);
        const std::uint64_t waits = hb.waits() - waits_before;
        if (waits > sources) fail(fmt::format("{} waits for {} source stream(s)", waits, sources));
    }
};

}  // namespace

namespace {

std::string run_program(std::uint64_t seed, std::size_t operations, std::size_t& checks) {
    fake::FakeDriver driver;
    model::HappensBefore hb(driver.api());
    fake::DriverOverride installed(hb.table());
    Program p(seed, hb, driver);
    const bool trace = env_number("CUDARC_MODEL_TRACE", 0) != 0;
    const sys::DriverApi& raw = hb.table();
    std::vector<DevicePtr> framework_memory;
    {
        auto device = Device::open(0);
        auto module = Module::from_ptx(device, kPtx);
        const auto rw = module.kernel<void(int*, const int*)>("rw");
        const auto untracked = module.kernel<void(int*)>("raw");

        std::vector<std::unique_ptr<Stream>> streams;
        for (int i = 0; i < 4; ++i) streams.push_back(std::make_unique<Stream>(device.create_stream()));
        // A framework: its own stream, wrapped (foreign), and memory cudarc borrows.
        sys::Stream framework_handle = nullptr;
        REQUIRE(raw.stream_create_with_priority(&framework_handle, sys::kStreamNonBlocking, 0) ==
                sys::kSuccess);
        auto framework = std::make_unique<Stream>(Stream::wrap(device, framework_handle));
        std::vector<sys::Stream> old_handles;
        std::vector<std::unique_ptr<Stream>> forks;

        struct Buffer {
            DeviceSlice<int> slice;
            std::vector<std::size_t> graphs;  // graphs that use it
        };
        std::vector<std::unique_ptr<Buffer>> buffers;
        struct Borrow {
            DevicePtr address = 0;
            std::size_t count = 0;
            std::optional<BorrowedSlice<int>> slice;
            std::unique_ptr<DlpackWatch> watch;  // set for a DLPack import
            std::unique_ptr<dlpack::DLManagedTensor> tensor;
            std::int64_t shape[1] = {0};
            bool lasting = false;  // synced to the owner: the framework may use it, then owner_wrote()
        };
        std::vector<Borrow> borrows(2);
        for (Borrow& b : borrows) {
            b.count = 64 * kIntsPerUnit;
            REQUIRE(raw.mem_alloc(&b.address, b.count * sizeof(int)) == sys::kSuccess);
            framework_memory.push_back(b.address);
        }
        std::vector<std::optional<Graph>> graphs;

        const auto all_streams = [&] {
            std::vector<Stream*> out{&device.default_stream(), framework.get()};
            for (auto& s : streams) out.push_back(s.get());
            for (auto& s : forks) out.push_back(s.get());
            return out;
        };
        // A random view (whole units) of a random buffer or borrowed slice; null when there is none.
        struct View {
            DeviceView<int> view;
            DevicePtr address;
            std::size_t bytes;
        };
        const auto random_view = [&](std::size_t max_units) -> std::optional<View> {
            std::vector<DeviceView<int>> candidates;
            for (auto& b : buffers) candidates.push_back(b->slice.view());
            for (auto& b : borrows) {
                if (b.slice && !b.lasting) candidates.push_back(b.slice->view());
            }
            if (candidates.empty()) return std::nullopt;
            const DeviceView<int> whole = candidates[p.pick(candidates.size())];
            const std::size_t units = whole.size() / kIntsPerUnit;
            const std::size_t first = p.pick(units);
            const std::size_t count = 1 + p.pick(std::min(max_units, units - first));
            const DeviceView<int> v = whole.subview(first * kIntsPerUnit, count * kIntsPerUnit);
            return View{v, v.device_ptr(), v.bytes()};
        };
        const auto drop_graphs_of = [&](Buffer& b) {
            for (std::size_t g : b.graphs) graphs[g].reset();
        };

        for (p.operations = 0; p.operations < operations && p.problem.empty(); ++p.operations) {
            std::vector<Stream*> candidates = all_streams();
            Stream& s = *candidates[p.pick(candidates.size())];
            const std::uint64_t waits = hb.waits();
            const std::size_t kind = p.pick(20);
            if (trace)
                fmt::print("op {} kind {} stream {}\n", p.operations, kind, hb.last_work(s.native()).stream);
            switch (kind) {
                case 0:
                case 1: {  // allocate
                    if (buffers.size() >= 12) break;
                    const std::size_t units = 1 + p.pick(24);
                    auto b = std::make_unique<Buffer>(
                        Buffer{DeviceSlice<int>::uninitialized(s, units * kIntsPerUnit), {}});
                    // The memory may have had an earlier life; the allocation counts as the home stream's
                    // write of it (its later users wait for that stream).
                    p.accesses.reallocated(b->slice.device_ptr(), b->slice.bytes(), hb.last_work(s.native()));
                    buffers.push_back(std::move(b));
                    break;
                }
                case 2: {  // free
                    if (buffers.empty()) break;
                    const std::size_t i = p.pick(buffers.size());
                    drop_graphs_of(*buffers[i]);
                    buffers.erase(buffers.begin() + static_cast<std::ptrdiff_t>(i));
                    break;
                }
                case 3:
                case 4: {  // memset
                    const auto v = random_view(32);
                    if (!v) break;
                    memset(s, v->view, static_cast<unsigned char>(p.pick(256)));
                    p.check(s, {{v->address, v->bytes, true}}, waits);
                    break;
                }
                case 5: {  // copy between views of the same size
                    const auto a = random_view(8);
                    const auto b = random_view(8);
                    if (!a || !b || a->bytes != b->bytes) break;
                    if (a->address < b->address + b->bytes && b->address < a->address + a->bytes) break;
                    copy(s, a->view, DeviceView<const int>(b->view));
                    p.check(s, {{b->address, b->bytes, false}, {a->address, a->bytes, true}}, waits);
                    break;
                }
                case 6:
                case 7: {  // a launch: one view written, one read
                    const auto w = random_view(16);
                    const auto r = random_view(16);
                    if (!w || !r) break;
                    launch(s, LaunchConfig{1, 1}, rw, w->view, DeviceView<const int>(r->view));
                    p.check(s, {{r->address, r->bytes, false}, {w->address, w->bytes, true}}, waits);
                    break;
                }
                case 8: {  // work through addresses: IndirectAccess
                    IndirectAccess access(s);
                    std::vector<model::Access> list;
                    const std::size_t n = 1 + p.pick(5);
                    for (std::size_t k = 0; k < n; ++k) {
                        const auto v = random_view(8);
                        if (!v) break;
                        const bool write = p.chance(40);
                        if (write) {
                            access.add(v->view);
                        } else {
                            access.add(DeviceView<const int>(v->view));
                        }
                        list.push_back({v->address, v->bytes, write});
                    }
                    if (list.empty()) break;
                    access.order();
                    launch(s, LaunchConfig{1, 1}, untracked, nullptr);
                    access.done();
                    p.check(s, list, waits);
                    break;
                }
                case 9: {  // prepare_indirect_access, then untracked work: a raw memset, recorded as a raw
                           // use
                    const auto v = random_view(8);
                    if (!v) break;
                    prepare_indirect_access(s, v->view);
                    REQUIRE(raw.memset_d32_async(v->address, 7, v->bytes / 4, s.native()) == sys::kSuccess);
                    p.check(s, {{v->address, v->bytes, true}}, waits);
                    break;
                }
                case 10: {  // a blocking copy to pageable host memory
                    const auto v = random_view(4);
                    if (!v || s.is_capturing()) break;
                    std::vector<int> host(v->view.size());
                    copy(s, std::span<int>(host), DeviceView<const int>(v->view));
                    p.check(s, {{v->address, v->bytes, false}}, waits);
                    break;
                }
                case 11: {  // fork or join
                    if (forks.size() < 6 && p.chance(55)) {
                        forks.push_back(std::make_unique<Stream>(s.fork()));
                    } else if (!forks.empty()) {
                        forks.erase(forks.begin() + static_cast<std::ptrdiff_t>(p.pick(forks.size())));
                    }
                    break;
                }
                case 12: {  // hold or release a stream ("a long kernel")
                    if (p.chance(50)) {
                        driver.hold(s.native());
                    } else {
                        driver.release(s.native());
                    }
                    break;
                }
                case 13: {  // capture a few operations
                    if (graphs.size() >= 6 || buffers.empty()) break;
                    std::vector<std::size_t> used;
                    Graph graph = capture(s, [&](Stream& c) {
                        const std::size_t n = 1 + p.pick(3);
                        for (std::size_t k = 0; k < n; ++k) {
                            const std::size_t bi = p.pick(buffers.size());
                            auto view = buffers[bi]->slice.view();
                            used.push_back(bi);
                            if (p.chance(50)) {
                                memset(c, view, 3);
                            } else {
                                const std::size_t ri = p.pick(buffers.size());
                                used.push_back(ri);
                                launch(c, LaunchConfig{1, 1}, rw, view,
                                       std::as_const(buffers[ri]->slice).view());
                            }
                        }
                    });
                    graphs.emplace_back(std::move(graph));
                    for (std::size_t bi : used) buffers[bi]->graphs.push_back(graphs.size() - 1);
                    break;
                }
                case 14: {  // replay a graph
                    std::vector<std::size_t> live;
                    for (std::size_t g = 0; g < graphs.size(); ++g) {
                        if (graphs[g]) live.push_back(g);
                    }
                    if (live.empty()) break;
                    Graph& graph = *graphs[live[p.pick(live.size())]];
                    graph.launch(s);
                    std::vector<model::Access> list;
                    for (const GraphAccess& a : graph.accesses())
                        list.push_back({a.address, a.bytes, a.writes});
                    p.check(s, list, waits);
                    break;
                }
                case 15:
                case 16: {  // the framework: raw work on its memory, or lend it to cudarc, or take it back
                    Borrow& b = borrows[p.pick(borrows.size())];
                    if (!b.slice && !b.watch) {
                        if (p.chance(50)) {
                            REQUIRE(raw.memset_d32_async(b.address, 1, b.count, framework->native()) ==
                                    sys::kSuccess);
                            p.check(*framework, {{b.address, b.count * sizeof(int), true}}, waits);
                        } else if (p.chance(50)) {
                            b.slice.emplace(device, b.address, b.count, *framework);
                            p.accesses.reallocated(b.address, b.count * sizeof(int),
                                                   hb.last_work(framework->native()));
                        } else {
                            // Imported through DLPack; the deleter checks that cudarc's uses completed.
                            b.watch = std::make_unique<DlpackWatch>(
                                DlpackWatch{&hb,
                                            &p.accesses,
                                            b.address,
                                            b.count * sizeof(int),
                                            hb.last_work(framework->native()).stream,
                                            p.accesses.sequence(),
                                            false,
                                            {}});
                            b.tensor = std::make_unique<dlpack::DLManagedTensor>();
                            b.shape[0] = static_cast<std::int64_t>(b.count);
                            b.tensor->dl_tensor.data =
                                reinterpret_cast<void*>(static_cast<std::uintptr_t>(b.address));
                            b.tensor->dl_tensor.device = {dlpack::kDLCUDA, 0};
                            b.tensor->dl_tensor.ndim = 1;
                            b.tensor->dl_tensor.dtype = {dlpack::kDLInt, 32, 1};
                            b.tensor->dl_tensor.shape = b.shape;
                            b.tensor->manager_ctx = b.watch.get();
                            b.tensor->deleter = [](dlpack::DLManagedTensor* self) {
                                auto* watch = static_cast<DlpackWatch*>(self->manager_ctx);
                                watch->released = true;
                                watch->problem =
                                    watch->model->complete(watch->address, watch->bytes, watch->hb->host(),
                                                           watch->owner, watch->since);
                            };
                            b.slice.emplace(from_dlpack<int>(device, b.tensor.get(), *framework));
                            p.accesses.reallocated(b.address, b.count * sizeof(int),
                                                   hb.last_work(framework->native()));
                        }
                    } else if (b.slice && b.lasting) {
                        // Synced earlier: the framework uses it, then says so.
                        REQUIRE(raw.memset_d32_async(b.address, 2, b.count, framework->native()) ==
                                sys::kSuccess);
                        p.check(*framework, {{b.address, b.count * sizeof(int), true}}, waits);
                        b.slice->owner_wrote();
                        p.accesses.reallocated(b.address, b.count * sizeof(int),
                                               hb.last_work(framework->native()));
                        b.lasting = false;
                    } else if (b.slice && !b.watch && p.chance(40)) {
                        b.slice->sync_owner();  // a borrow that lasts
                        b.lasting = true;
                    } else if (b.slice) {
                        b.slice.reset();  // released: the owner's stream waits for cudarc's uses
                    }
                    break;
                }
                case 17: {  // the framework's wrapper goes and comes back (retirement), when nothing is lent
                    const bool lent = std::any_of(borrows.begin(), borrows.end(),
                                                  [](const Borrow& b) { return b.slice.has_value(); });
                    if (lent || !p.chance(20)) break;
                    // Note: a new stream each time (the old handle stays alive, so that its value is never
                    // reused while the model knows it); a second wrapper of one live handle is another
                    // timeline of the same queue, which the model would count as one source.
                    old_handles.push_back(framework_handle);
                    REQUIRE(raw.stream_create_with_priority(&framework_handle, sys::kStreamNonBlocking, 0) ==
                            sys::kSuccess);
                    {
                        // The framework orders its new stream after its old one, as a framework would.
                        sys::Event handover = nullptr;
                        REQUIRE(raw.event_create(&handover, sys::kEventDisableTiming) == sys::kSuccess);
                        REQUIRE(raw.event_record(handover, old_handles.back()) == sys::kSuccess);
                        REQUIRE(raw.stream_wait_event(framework_handle, handover, 0) == sys::kSuccess);
                        REQUIRE(raw.event_destroy(handover) == sys::kSuccess);
                    }
                    framework = std::make_unique<Stream>(Stream::wrap(device, framework_handle));
                    break;
                }
                case 18: {  // a host synchronization now and then
                    if (p.chance(10)) s.synchronize();
                    break;
                }
                default:
                    break;
            }
            for (Borrow& b : borrows) {
                if (b.watch && b.watch->released) {
                    if (!b.watch->problem.empty()) p.fail(b.watch->problem);
                    b.watch.reset();
                    b.tensor.reset();
                }
            }
        }
        driver.finish_all();
        graphs.clear();
        buffers.clear();
        for (Borrow& b : borrows) b.slice.reset();
        device.synchronize();
        for (Borrow& b : borrows) {
            if (b.watch && !b.watch->released) p.fail("a DLPack deleter never ran");
            if (b.watch && !b.watch->problem.empty()) p.fail(b.watch->problem);
        }
        forks.clear();
        streams.clear();
        framework.reset();
        old_handles.push_back(framework_handle);
        for (sys::Stream h : old_handles) REQUIRE(raw.stream_destroy(h) == sys::kSuccess);
    }
    for (DevicePtr address : framework_memory) REQUIRE(raw.mem_free(address) == sys::kSuccess);
    for (const std::string& v : driver.violations()) p.fail("fake driver: " + v);
    checks += p.accesses.checks();
    return p.problem;
}

}  // namespace

TEST_CASE("tracking.random_programs_keep_every_conflicting_pair_ordered") {
    const std::uint64_t one = env_number("CUDARC_MODEL_SEED", 0);
    const std::uint64_t programs = one != 0 ? 1 : env_number("CUDARC_MODEL_PROGRAMS", 25);
    const std::size_t operations = env_number("CUDARC_MODEL_OPERATIONS", 4000);
    std::size_t checks = 0;
    for (std::uint64_t k = 0; k < programs; ++k) {
        const std::uint64_t seed = one != 0 ? one : 1000 + k;
        const std::string problem = run_program(seed, operations, checks);
        INFO("seed ", seed, " (rerun with CUDARC_MODEL_SEED=", seed, ")");
        REQUIRE_MESSAGE(problem.empty(), problem);
    }
    MESSAGE(programs, " programs of ", operations, " operations (", programs * operations, " in all), ",
            checks, " ordering checks");
}
