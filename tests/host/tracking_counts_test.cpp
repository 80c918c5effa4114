// Note [Stream timelines] on the fake driver: what hazard tracking costs in driver calls follows streams,
// not buffers. A step over 1024 buffers fed by another stream, eagerly and as a replay, makes one wait and
// at most two events; sub-views on 64 streams wait for nothing but their forks and joins; a borrow that
// lasts costs no driver call to renew; a step's DLPack deleters wait as one group.
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/buffer.hpp"
#include "core/device_state.hpp"
#include "reliability_support.hpp"

using namespace cudarc;
using cudarc::test::contains;
using cudarc::test::error_from;
using cudarc::test::FakeGpu;

namespace {

constexpr const char* kPtx =
    ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry touch(.param .u64 p) { ret; }\n";
constexpr std::size_t kTensors = 1024;

// The optimizer's shape: parameters on the step's stream, gradients from `feed`; one operation reaches all
// of them through addresses (IndirectAccess), like a multi-tensor kernel.
struct Step {
    Device device = Device::open(0);
    Stream feed = device.create_stream();
    Stream stream = device.create_stream();
    Module module = Module::from_ptx(device, kPtx);
    Kernel<void(int*)> touch = module.kernel<void(int*)>("touch");
    std::vector<DeviceSlice<float>> params;
    std::vector<DeviceSlice<float>> grads;

    explicit Step(Stream* grads_stream = nullptr) {
        for (std::size_t i = 0; i < kTensors; ++i) {
            params.push_back(DeviceSlice<float>::zeros(stream, 64));
            grads.push_back(DeviceSlice<float>::zeros(grads_stream != nullptr ? *grads_stream : feed, 64));
        }
    }
    void write_grads(Stream& on) {
        for (auto& g : grads) memset(on, g.view(), 1);
    }
    void run() {
        IndirectAccess access(stream);
        for (std::size_t i = 0; i < kTensors; ++i) {
            access.add(params[i].view());
            access.add(std::as_const(grads[i]).view());
        }
        access.order();
        launch(stream, LaunchConfig{1, 1}, touch, nullptr);
        access.done();
    }
};

}  // namespace

TEST_CASE("tracking.a_step_over_1024_buffers_fed_by_another_stream_costs_one_wait") {
    FakeGpu gpu;
    {
        Step step;
        for (int round = 0; round < 4; ++round) {
            const auto fed = step.device.counters();
            step.write_grads(step.feed);
            const auto feed = step.device.counters() - fed;
            if (round > 0) {
                // The feed waits once for the last step's reads of all 1024 gradients (write after read).
                CHECK(feed.cross_stream_waits == 1);
                CHECK(feed.events_recorded == 0);
            }
            const auto before = step.device.counters();
            step.run();
            const auto delta = step.device.counters() - before;
            CHECK(delta.cross_stream_waits == 1);  // for the feed's work on all 1024 gradients
            CHECK(delta.events_recorded == 2);     // that work's end, and the step's own (shared after it)
            CHECK(delta.host_synchronizations() == 0);
        }
    }
    CHECK(gpu.driver.violations().empty());
}

// Note [Hand-over reads]: each of a step's 1024 whole reads of gradients another stream wrote is recorded
// (the room for them grows past what the thread keeps, and is reused the next round).
TEST_CASE("tracking.every_hand_over_read_of_a_step_is_recorded") {
    FakeGpu gpu;
    {
        Step step;
        auto* feed = &cudarc::detail::Internals::stream_state(step.feed).timeline();
        for (int round = 0; round < 3; ++round) {
            step.write_grads(step.feed);
            for (const auto& g : step.grads)
                REQUIRE(cudarc::detail::Internals::buffer(g.view())->hazards().exclusive() == feed);
            step.run();
            std::size_t recorded = 0;
            for (const auto& g : step.grads) {
                // The feed's write, and the step's read beside it: no longer the feed's alone.
                const auto& hazards = cudarc::detail::Internals::buffer(g.view())->hazards();
                if (hazards.exclusive() == nullptr) ++recorded;
            }
            CHECK(recorded == kTensors);
        }
    }
    CHECK(gpu.driver.violations().empty());
}

// Note [One foreign reader]: a buffer written on one stream and read whole on another holds that writer
// and that reader (as one range, no table built); the writer's next write waits for the read once.
TEST_CASE("tracking.a_buffer_read_whole_on_another_stream_holds_its_writer_and_one_reader") {
    FakeGpu gpu;
    {
        Step step;
        auto& grad = step.grads.front();
        const auto& hazards = cudarc::detail::Internals::buffer(grad.view())->hazards();
        auto* feed = &cudarc::detail::Internals::stream_state(step.feed).timeline();
        auto* reader = &cudarc::detail::Internals::stream_state(step.stream).timeline();
        for (int round = 0; round < 3; ++round) {
            memset(step.feed, grad.view(), 1);
            CHECK(hazards.exclusive() == feed);
            hazards.inspect([](auto ranges) { CHECK(ranges.empty()); });
            const auto before = step.device.counters();
            {
                IndirectAccess access(step.stream);
                access.add(std::as_const(grad).view());
                access.order();
                launch(step.stream, LaunchConfig{1, 1}, step.touch, nullptr);
                access.done();
            }
            CHECK((step.device.counters() - before).cross_stream_waits == 1);
            // No longer the feed's alone, and what stands for the table: the feed wrote, the stream read.
            CHECK(hazards.exclusive() == nullptr);
            hazards.inspect([&](auto ranges) {
                REQUIRE(ranges.size() == 1);
                CHECK(ranges[0].end == grad.size() * sizeof(float));
                REQUIRE(ranges[0].writers.size() == 1);
                CHECK(ranges[0].writers[0].timeline == feed);
                REQUIRE(ranges[0].readers.size() == 1);
                CHECK(ranges[0].readers[0].timeline == reader);
            });
            // The feed's next write waits for that read, once.
            const auto again = step.device.counters();
            memset(step.feed, grad.view(), 2);
            CHECK((step.device.counters() - again).cross_stream_waits == 1);
        }
    }
    CHECK(gpu.driver.violations().empty());
}

TEST_CASE("tracking.a_step_fed_by_its_own_stream_records_and_waits_for_nothing") {
    FakeGpu gpu;
    {
        Step step;
        step.write_grads(step.stream);
        step.run();
        for (int round = 0; round < 3; ++round) {
            step.write_grads(step.stream);
            const auto before = step.device.counters();
            step.run();
            const auto delta = step.device.counters() - before;
            CHECK(delta.cross_stream_waits == 0);
            CHECK(delta.events_recorded == 0);
        }
    }
    CHECK(gpu.driver.violations().empty());
}

TEST_CASE("tracking.a_replay_is_one_operation") {
    FakeGpu gpu;
    {
        Step step;
        step.write_grads(step.feed);
        step.stream.join(step.feed);
        Graph graph = capture(step.stream, [&](Stream&) { step.run(); });
        REQUIRE(graph.accesses().size() >= 2 * kTensors);
        for (int round = 0; round < 4; ++round) {
            const auto fed = step.device.counters();
            step.write_grads(step.feed);
            const auto feed = step.device.counters() - fed;
            if (round > 0) CHECK(feed.cross_stream_waits == 1);
            const auto before = step.device.counters();
            graph.launch(step.stream);
            const auto delta = step.device.counters() - before;
            CHECK(delta.cross_stream_waits == 1);
            CHECK(delta.events_recorded <= 2);
        }
        // Fed by its own stream, a replay records and waits for nothing.
        step.stream.join(step.feed);
        step.write_grads(step.stream);
        graph.launch(step.stream);
        const auto before = step.device.counters();
        step.write_grads(step.stream);
        graph.launch(step.stream);
        const auto delta = step.device.counters() - before;
        CHECK(delta.cross_stream_waits == 0);
        CHECK(delta.events_recorded == 0);
    }
    CHECK(gpu.driver.violations().empty());
}

TEST_CASE("tracking.sub_views_on_64_streams_wait_only_for_their_forks_and_joins") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto parent = device.create_stream();
        auto module = Module::from_ptx(device, kPtx);
        const auto touch = module.kernel<void(int*)>("touch");
        constexpr std::size_t kStreams = 64;
        auto items = DeviceSlice<int>::zeros(parent, kStreams * 16);
        for (int round = 0; round < 3; ++round) {
            const auto before = device.counters();
            {
                std::vector<Stream> children;
                for (std::size_t k = 0; k < kStreams; ++k) children.push_back(parent.fork());
                for (std::size_t k = 0; k < kStreams; ++k)
                    memset(children[k], items.view(k * 16, 16), static_cast<unsigned char>(round));
            }
            const auto delta = device.counters() - before;
            // One wait per fork and per join: each child has seen, through its fork, whatever wrote its item
            // before (the parent's zeros, or the last round's children, which the parent joined).
            CHECK(delta.cross_stream_waits == 2 * kStreams);
            CHECK(delta.host_synchronizations() == 0);
        }
        // The parent reads it all: it has joined every child.
        const auto before = device.counters();
        launch(parent, LaunchConfig{1, 1}, touch, items);
        CHECK((device.counters() - before).cross_stream_waits == 0);
    }
    CHECK(gpu.driver.violations().empty());
}

// Note [Owner's last access]: a buffer handed from one pooled stream to another waits for its last
// writer's access to it, which the new stream has seen through its fork, not for whatever that writer
// enqueued since (this round's kernel on another buffer: the rounds would run one stream after another).
TEST_CASE("tracking.separate_buffers_handed_between_pooled_streams_wait_only_for_forks_and_joins") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto parent = device.create_stream();
        constexpr std::size_t kStreams = 64;
        std::vector<DeviceSlice<int>> items;
        for (std::size_t k = 0; k < kStreams; ++k) items.push_back(DeviceSlice<int>::zeros(parent, 16));
        for (std::size_t round = 0; round < 4; ++round) {
            const auto before = device.counters();
            {
                std::vector<Stream> children;
                for (std::size_t k = 0; k < kStreams; ++k) children.push_back(parent.fork());
                // Each item goes to another child than last round's writer.
                for (std::size_t k = 0; k < kStreams; ++k)
                    memset(children[k], items[(k + round) % kStreams].view(),
                           static_cast<unsigned char>(round));
            }
            const auto delta = device.counters() - before;
            CHECK(delta.cross_stream_waits == 2 * kStreams);
            CHECK(delta.host_synchronizations() == 0);
        }
    }
    CHECK(gpu.driver.violations().empty());
}

TEST_CASE("tracking.a_borrow_that_lasts_is_renewed_without_driver_calls") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto owner = device.create_stream();
        auto other = device.create_stream();
        std::vector<DeviceSlice<float>> memory;
        std::vector<BorrowedSlice<float>> borrowed;
        for (int i = 0; i < 256; ++i) {
            memory.push_back(DeviceSlice<float>::zeros(owner, 32));
            borrowed.emplace_back(device, memory.back().device_ptr(), 32, owner);
        }
        auto module = Module::from_ptx(device, kPtx);
        const auto touch = module.kernel<void(int*)>("touch");
        for (int round = 0; round < 3; ++round) {
            const auto renew = device.counters();
            for (auto& b : borrowed) b.owner_wrote();
            CHECK(device.counters() - renew == Counters{});  // bookkeeping only
            // Stepped on another stream: one wait for the owner's (unseen) work, one for the owner after.
            const auto before = device.counters();
            IndirectAccess access(other);
            for (auto& b : borrowed) access.add(b.view());
            access.order();
            launch(other, LaunchConfig{1, 1}, touch, nullptr);
            access.done();
            for (auto& b : borrowed) b.sync_owner();
            const auto delta = device.counters() - before;
            CHECK(delta.cross_stream_waits == 2);
            CHECK(delta.events_recorded <= 2);
        }
        // Stepped on the owner's own stream: nothing at all.
        for (auto& b : borrowed) b.owner_wrote();
        const auto before = device.counters();
        {
            IndirectAccess access(owner);
            for (auto& b : borrowed) access.add(b.view());
            access.order();
            launch(owner, LaunchConfig{1, 1}, touch, nullptr);
            access.done();
        }
        for (auto& b : borrowed) b.sync_owner();
        const auto delta = device.counters() - before;
        CHECK(delta.cross_stream_waits == 0);
        CHECK(delta.events_recorded == 0);
        // Without an owner stream there is nothing to renew.
        BorrowedSlice<float> ownerless(device, memory.front().device_ptr(), 32);
        CHECK(contains(error_from([&] { ownerless.owner_wrote(); }), "no owner stream"));
        CHECK(contains(error_from([&] { ownerless.sync_owner(); }), "no owner stream"));
    }
    CHECK(gpu.driver.violations().empty());
}

namespace {

// A DLPack tensor of one float array whose deleter notes the order it ran in.
struct Tensor {
    std::array<std::int64_t, 1> shape{32};
    std::vector<int>* deleted = nullptr;
    int index = 0;
    dlpack::DLManagedTensorVersioned managed{};
    dlpack::DLManagedTensorVersioned* make(DevicePtr ptr, std::vector<int>& log, int i) {
        deleted = &log;
        index = i;
        managed = {};
        managed.version = {1, 1};
        managed.manager_ctx = this;
        managed.deleter = [](dlpack::DLManagedTensorVersioned* self) {
            auto* t = static_cast<Tensor*>(self->manager_ctx);
            t->deleted->push_back(t->index);
        };
        managed.dl_tensor.data = reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr));
        managed.dl_tensor.device = {dlpack::kDLCUDA, 0};
        managed.dl_tensor.ndim = 1;
        managed.dl_tensor.dtype = {dlpack::kDLFloat, 32, 1};
        managed.dl_tensor.shape = shape.data();
        return &managed;
    }
};

}  // namespace

TEST_CASE("tracking.a_steps_dlpack_deleters_wait_as_one_group") {
    // Note [Deferred release]: a step's releases share one event, so their deleters form one group. The
    // next step's borrows poll the queue: one event query per poll, however many deleters wait, and a poll
    // that finds nothing ready lets the next kSkippedPolls borrows pass.
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto& releases = cudarc::detail::Internals::device_state(device)->releases();
        auto owner = device.create_stream();
        auto module = Module::from_ptx(device, kPtx);
        const auto touch = module.kernel<void(int*)>("touch");
        constexpr int kCount = 256;
        std::vector<DeviceSlice<float>> memory;
        for (int i = 0; i < kCount; ++i) memory.push_back(DeviceSlice<float>::zeros(owner, 32));
        std::vector<Tensor> tensors(2 * kCount);
        std::vector<int> deleted;
        const auto borrow_all = [&](int first) {
            std::vector<BorrowedSlice<float>> out;
            for (int i = 0; i < kCount; ++i) {
                out.push_back(from_dlpack<float>(
                    device, tensors[first + i].make(memory[i].device_ptr(), deleted, first + i), owner));
            }
            return out;
        };
        gpu.driver.hold(owner.native());  // the step's kernel stays queued: its event is not complete
        {
            std::vector<BorrowedSlice<float>> step = borrow_all(0);
            IndirectAccess access(owner);
            for (auto& b : step) access.add(b.view());
            access.order();
            launch(owner, LaunchConfig{1, 1}, touch, nullptr);
            access.done();
        }  // released
        CHECK(deleted.empty());
        CHECK(releases.queued() == kCount);
        CHECK(releases.groups() == 1);
        const std::uint64_t queries = gpu.faults.calls(fake::Entry::event_query);
        std::vector<BorrowedSlice<float>> next = borrow_all(kCount);
        constexpr unsigned kEvery = cudarc::detail::DeferredReleases::kSkippedPolls + 1;
        CHECK(gpu.faults.calls(fake::Entry::event_query) - queries == (kCount + kEvery - 1) / kEvery);
        CHECK(deleted.empty());
        gpu.driver.release(owner.native());
        owner.synchronize();  // polls after the wait: every deleter runs, in the order they were queued
        REQUIRE(deleted.size() == kCount);
        for (int i = 0; i < kCount; ++i) CHECK(deleted[static_cast<std::size_t>(i)] == i);
        CHECK(releases.queued() == 0);
        CHECK(releases.groups() == 0);
        next.clear();  // unused: their deleters wait only for the owner's work before the borrow
        owner.synchronize();
        CHECK(deleted.size() == 2 * kCount);
    }
    CHECK(gpu.driver.violations().empty());
}

TEST_CASE("tracking.a_dlpack_deleter_that_releases_another_borrow") {
    // A release hook may release another borrowed buffer on the same thread, inside the first release
    // (Note [Deferred release]; the release's room kept per thread is taken out while in use). Both
    // deleters run once, and the inner buffer's uses are still waited for.
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto owner = device.create_stream();
        auto other = device.create_stream();
        auto module = Module::from_ptx(device, kPtx);
        const auto touch = module.kernel<void(int*)>("touch");
        auto outer_memory = DeviceSlice<float>::zeros(owner, 32);
        auto inner_memory = DeviceSlice<float>::zeros(owner, 32);
        owner.synchronize();
        struct Outer {
            std::optional<BorrowedSlice<float>> inner;
            int runs = 0;
        } outer_context;
        std::vector<int> deleted;
        Tensor inner_tensor;
        outer_context.inner.emplace(
            from_dlpack<float>(device, inner_tensor.make(inner_memory.device_ptr(), deleted, 2), owner));
        // The inner buffer is used on another stream, held back: its deleter must wait for that use.
        gpu.driver.hold(other.native());
        {
            IndirectAccess access(other);
            access.add(outer_context.inner->view());
            access.order();
            launch(other, LaunchConfig{1, 1}, touch, nullptr);
            access.done();
        }
        dlpack::DLManagedTensorVersioned outer{};
        std::array<std::int64_t, 1> shape{32};
        outer.version = {1, 1};
        outer.manager_ctx = &outer_context;
        outer.deleter = [](dlpack::DLManagedTensorVersioned* self) {
            auto* context = static_cast<Outer*>(self->manager_ctx);
            ++context->runs;
            context->inner.reset();  // releases the inner borrow from inside this deleter
        };
        outer.dl_tensor.data =
            reinterpret_cast<void*>(static_cast<std::uintptr_t>(outer_memory.device_ptr()));
        outer.dl_tensor.device = {dlpack::kDLCUDA, 0};
        outer.dl_tensor.ndim = 1;
        outer.dl_tensor.dtype = {dlpack::kDLFloat, 32, 1};
        outer.dl_tensor.shape = shape.data();
        {
            // Borrowed with no owner stream and never used: its release waits for nothing, so the deleter
            // runs inside the release itself.
            BorrowedSlice<float> unused = from_dlpack<float>(device, &outer);
        }
        CHECK(outer_context.runs == 1);
        CHECK_FALSE(outer_context.inner.has_value());
        CHECK(deleted.empty());  // the inner one waits for the held-back use on `other`
        gpu.driver.release(other.native());
        other.synchronize();
        REQUIRE(deleted.size() == 1);
        CHECK(deleted.front() == 2);
        CHECK(outer_context.runs == 1);
    }
    CHECK(gpu.driver.violations().empty());
}

TEST_CASE("tracking.an_indirect_access_destroyed_without_done_still_orders_later_writers") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto feed = device.create_stream();
        auto step = device.create_stream();
        auto grads = DeviceSlice<float>::zeros(feed, 64);
        {
            // A hand-over read (Note [Hand-over reads]) whose work may be half enqueued: an exception
            // between order() and done(), say.
            IndirectAccess access(step);
            access.add(std::as_const(grads).view());
            const auto ordering = device.counters();
            access.order();
            CHECK((device.counters() - ordering).cross_stream_waits == 1);  // after the feed's zeros
        }
        // The feed's next write waits for the step's read, recorded at the step's position then.
        const auto before = device.counters();
        memset(feed, grads.view(), 0);
        CHECK((device.counters() - before).cross_stream_waits == 1);
    }
    CHECK(gpu.driver.violations().empty());
}

TEST_CASE("tracking.a_read_declared_before_a_capture_and_ordered_inside_it_belongs_to_the_graph") {
    FakeGpu gpu;
    {
        auto device = Device::open(0);
        auto feed = device.create_stream();
        auto step = device.create_stream();
        auto module = Module::from_ptx(device, kPtx);
        const auto touch = module.kernel<void(int*)>("touch");
        auto grads = DeviceSlice<float>::zeros(feed, 64);
        step.join(feed);
        // Declared outside any capture, as a hand-over read (Note [Hand-over reads]); ordered and done
        // inside one, where the capture's own timelines order it.
        IndirectAccess access(step);
        access.add(std::as_const(grads).view());
        Graph graph = capture(step, [&](Stream& s) {
            access.order();
            launch(s, LaunchConfig{1, 1}, touch, nullptr);
            access.done();
        });
        const std::vector<GraphAccess> accesses = graph.accesses();
        REQUIRE(accesses.size() == 1);
        CHECK(accesses[0].address == grads.device_ptr());
        CHECK(accesses[0].bytes == grads.bytes());
        CHECK_FALSE(accesses[0].writes);
        // A replay fed by a new write on the feed waits for it; the feed's next write waits for the replay.
        memset(feed, grads.view(), 0);
        auto before = device.counters();
        graph.launch(step);
        CHECK((device.counters() - before).cross_stream_waits == 1);
        before = device.counters();
        memset(feed, grads.view(), 0);
        CHECK((device.counters() - before).cross_stream_waits == 1);
    }
    CHECK(gpu.driver.violations().empty());
}
