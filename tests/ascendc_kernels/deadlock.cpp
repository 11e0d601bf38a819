// (c) deadlock kernels.  variant 0: an AIC waits on an intra-core event that nobody sets.
// variant 1 (MIX 1:2): the AIVs wait on a cross-core flag that the AIC never sets (watchdog).
using namespace AscendC;

extern "C" __global__ __aicore__ void deadlock_kernel(GM_ADDR out, GM_ADDR variant) {
  const uint32_t v = *reinterpret_cast<__gm__ uint32_t*>(variant);
  if (v == 0) {
    if ASCEND_IS_AIC {
      SetFlag<HardEvent::MTE2_MTE1>(0);
      WaitFlag<HardEvent::MTE2_MTE1>(0);
      WaitFlag<HardEvent::MTE2_MTE1>(1);  // never set
    }
  } else {
    if ASCEND_IS_AIV {
      CrossCoreWaitFlag(3);  // the AIC never calls CrossCoreSetFlag<2, ...>(3)
    }
  }
}

#ifdef ASCENDC_EMU
#include "emu_driver.h"
// usage: deadlock variant numBlocks
int main(int argc, char** argv) {
  uint32_t v = drv::arg(argc, argv, 1), blocks = drv::arg(argc, argv, 2);
  std::vector<uint8_t> out(64);
  emu::Launch(deadlock_kernel, blocks, v == 0 ? emu::Mode::AIC_ONLY : emu::Mode::MIX_1_2, out.data(), reinterpret_cast<uint8_t*>(&v));
  return 0;
}
#endif
