// The backend from C++ (no Python): factories, copies and the compiled add.
// spec: B3, D5, G2
#include <ATen/ATen.h>
#include <c10/core/impl/alloc_cpu.h>

#include "gtest/gtest.h"
#include "rbln/core/counters.h"

namespace {

const c10::Device kRbln(c10::DeviceType::PrivateUse1, 0);

TEST(BackendTest, RoundTripThroughDeviceMemory) {
  at::Tensor host = at::arange(12, at::kFloat).reshape({3, 4});
  at::Tensor dev = host.to(kRbln);
  EXPECT_EQ(dev.device(), kRbln);
  EXPECT_TRUE(at::equal(dev.cpu(), host));
  EXPECT_TRUE(at::equal(dev.t().contiguous().cpu(), host.t().contiguous()));
  EXPECT_EQ(dev[2][3].item<float>(), 11.0f);
}

TEST(BackendTest, HalfAddCompilesOnceAndMatchesCpu) {
  rbln::Counter* compiles =
      rbln::CounterRegistry::Global().Get("compiler/compiles");
  rbln::Counter* hits = rbln::CounterRegistry::Global().Get("dispatch/warm_hits");
  at::Tensor a = at::randn({4, 64}).to(at::kHalf);
  at::Tensor b = at::randn({4, 64}).to(at::kHalf);
  const int64_t c0 = compiles->value(), h0 = hits->value();
  at::Tensor x = a.to(kRbln), y = b.to(kRbln);
  at::Tensor z1 = at::add(x, y);
  at::Tensor z2 = at::add(x, y);
  EXPECT_EQ(compiles->value(), c0 + 1);
  EXPECT_EQ(hits->value(), h0 + 1);
  EXPECT_TRUE(at::equal(z1.cpu(), a + b));
  EXPECT_TRUE(at::equal(z2.cpu(), a + b));
}

TEST(BackendTest, DataPtrIsNotHostMemory) {
  at::Tensor dev = at::ones({16}).to(kRbln);
  // A device address: the host allocator never hands out this range, and the
  // runtime reports it as device memory of NPU 0.
  EXPECT_NE(dev.data_ptr(), nullptr);
  EXPECT_DEATH({ [[maybe_unused]] volatile float v = *static_cast<float*>(dev.data_ptr()); }, "");
}

}  // namespace
