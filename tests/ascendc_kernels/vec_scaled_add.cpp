// (d) vector-core kernel: z = alpha * x + y over bf16 vectors (fp32 compute in UB), TQue double buffering.
// op 0: Cast, Muls, Add, Cast.   op 1: Cast, Axpy, Cast.   op 2: Duplicate(alpha) + Mul + Add.
using namespace AscendC;

struct VecTiling { uint32_t total, tile, op; float alpha; };
constexpr int32_t BUFFER_NUM = 2;

class KernelScaledAdd {
 public:
  __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, GM_ADDR z, const VecTiling& t) {
    tile_ = t.tile; op_ = t.op; alpha_ = t.alpha;
    per_core_ = t.total / GetBlockNum();
    uint64_t base = (uint64_t)per_core_ * GetBlockIdx();
    gx_.SetGlobalBuffer(reinterpret_cast<__gm__ bfloat16_t*>(x) + base, per_core_);
    gy_.SetGlobalBuffer(reinterpret_cast<__gm__ bfloat16_t*>(y) + base, per_core_);
    gz_.SetGlobalBuffer(reinterpret_cast<__gm__ bfloat16_t*>(z) + base, per_core_);
    pipe_.InitBuffer(inX_, BUFFER_NUM, tile_ * sizeof(bfloat16_t));
    pipe_.InitBuffer(inY_, BUFFER_NUM, tile_ * sizeof(bfloat16_t));
    pipe_.InitBuffer(outZ_, BUFFER_NUM, tile_ * sizeof(bfloat16_t));
    pipe_.InitBuffer(fx_, tile_ * sizeof(float));
    pipe_.InitBuffer(fy_, tile_ * sizeof(float));
    pipe_.InitBuffer(fa_, tile_ * sizeof(float));
  }
  __aicore__ inline void Process() {
    const uint32_t n = per_core_ / tile_;
    for (uint32_t i = 0; i < n; ++i) {
      CopyIn(i);
      Compute();
      CopyOut(i);
    }
  }

 private:
  __aicore__ inline void CopyIn(uint32_t i) {
    LocalTensor<bfloat16_t> x = inX_.AllocTensor<bfloat16_t>();
    LocalTensor<bfloat16_t> y = inY_.AllocTensor<bfloat16_t>();
    DataCopy(x, gx_[(uint64_t)i * tile_], tile_);
    DataCopy(y, gy_[(uint64_t)i * tile_], tile_);
    inX_.EnQue(x);
    inY_.EnQue(y);
  }
  __aicore__ inline void Compute() {
    LocalTensor<bfloat16_t> x = inX_.DeQue<bfloat16_t>();
    LocalTensor<bfloat16_t> y = inY_.DeQue<bfloat16_t>();
    LocalTensor<bfloat16_t> z = outZ_.AllocTensor<bfloat16_t>();
    LocalTensor<float> fx = fx_.Get<float>(), fy = fy_.Get<float>(), fa = fa_.Get<float>();
    const int32_t n = (int32_t)tile_;
    Cast(fx, x, RoundMode::CAST_NONE, tile_);
    Cast(fy, y, RoundMode::CAST_NONE, tile_);
    if (op_ == 0) {
      Muls(fx, fx, alpha_, n);
      Add(fx, fx, fy, n);
      Cast(z, fx, RoundMode::CAST_RINT, tile_);
    } else if (op_ == 1) {
      Axpy(fy, fx, alpha_, n);
      Cast(z, fy, RoundMode::CAST_RINT, tile_);
    } else {
      Duplicate(fa, alpha_, n);
      Mul(fx, fx, fa, n);
      Add(fx, fx, fy, n);
      Cast(z, fx, RoundMode::CAST_RINT, tile_);
    }
    outZ_.EnQue(z);
    inX_.FreeTensor(x);
    inY_.FreeTensor(y);
  }
  __aicore__ inline void CopyOut(uint32_t i) {
    LocalTensor<bfloat16_t> z = outZ_.DeQue<bfloat16_t>();
    DataCopy(gz_[(uint64_t)i * tile_], z, tile_);
    outZ_.FreeTensor(z);
  }
  TPipe pipe_;
  TQue<TPosition::VECIN, BUFFER_NUM> inX_, inY_;
  TQue<TPosition::VECOUT, BUFFER_NUM> outZ_;
  TBuf<TPosition::VECCALC> fx_, fy_, fa_;
  GlobalTensor<bfloat16_t> gx_, gy_, gz_;
  uint32_t tile_ = 0, op_ = 0, per_core_ = 0;
  float alpha_ = 0;
};

extern "C" __global__ __aicore__ void scaled_add(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR tiling) {
  VecTiling t = *reinterpret_cast<__gm__ VecTiling*>(tiling);
  KernelScaledAdd op;
  op.Init(x, y, z, t);
  op.Process();
}

#ifdef ASCENDC_EMU
#include <cstring>
#include "emu_driver.h"
// usage: vec total tile op alpha numBlocks x.bin y.bin z.bin
int main(int argc, char** argv) {
  VecTiling t{drv::arg(argc, argv, 1), drv::arg(argc, argv, 2), drv::arg(argc, argv, 3), (float)std::atof(argv[4])};
  uint32_t blocks = drv::arg(argc, argv, 5);
  auto x = drv::read_file(argv[6]);
  auto y = drv::read_file(argv[7]);
  std::vector<uint8_t> z((size_t)t.total * 2, 0xCD);
  emu::Launch(scaled_add, blocks, emu::Mode::AIV_ONLY, x.data(), y.data(), z.data(), reinterpret_cast<uint8_t*>(&t));
  drv::write_file(argv[8], z.data(), z.size());
  return 0;
}
#endif
