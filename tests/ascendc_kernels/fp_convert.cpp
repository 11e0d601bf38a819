// Emulator self-test (host only, no kernel): encode float32 inputs into the emulated storage types so the
// test can compare bit patterns with torch (bf16, fp16, fp8 e4m3fn / e5m2, e8m0, fp4 e2m1).
#ifdef ASCENDC_EMU
#include "emu_driver.h"
// usage: fp_convert in_f32.bin out.bin   (out: per input 1x u16 bf16, u16 half, u8 e4m3, u8 e5m2, u8 e8m0, u8 e2m1)
int main(int argc, char** argv) {
  auto in = drv::read_file(argv[1]);
  size_t n = (in.size() - 64) / 4;
  const float* x = reinterpret_cast<const float*>(in.data());
  std::vector<uint8_t> out(n * 8);
  for (size_t i = 0; i < n; ++i) {
    bfloat16_t b(x[i]); half h(x[i]); fp8_e4m3fn_t e4(x[i]); fp8_e5m2_t e5(x[i]); fp8_e8m0_t e8(x[i]);
    fp4x2_e2m1_t f4{0}; f4.set(0, x[i]);
    std::memcpy(&out[i * 8 + 0], &b.bits, 2);
    std::memcpy(&out[i * 8 + 2], &h.bits, 2);
    out[i * 8 + 4] = e4.bits; out[i * 8 + 5] = e5.bits; out[i * 8 + 6] = e8.bits; out[i * 8 + 7] = f4.bits;
    // decode round trip must be exact
    if (!(std::isnan((float)b) || (float)bfloat16_t((float)b) == (float)b)) emu::fail("bf16 round trip");
  }
  drv::write_file(argv[2], out.data(), out.size());
  return 0;
}
#endif
