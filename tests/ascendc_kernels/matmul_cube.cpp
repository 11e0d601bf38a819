// (a) cube-only GEMM: C[M,N] = A[M,K] * Bt[N,K]^T, tile loop over (baseM x baseN) output tiles spread over the
// launched AI cores; GM->L1 ND->NZ, L1->L0A/L0B, Mmad (fp32 L0C), Fixpipe to GM as f32 or bf16.
// IN_T selects the input dtype (bfloat16_t default; fp8_e4m3fn_t is 950-only).
// Build variants: -DDROP_WAIT_MTE2_MTE1 / -DDROP_WAIT_MTE1_MTE2 remove one WaitFlag (race checker tests).
#include "cube_gemm.h"
#ifndef IN_T
#define IN_T bfloat16_t
#endif
using namespace AscendC;

struct MatmulTiling { uint32_t M, N, K, baseM, baseN, baseK, outBf16; };

extern "C" __global__ __aicore__ void matmul_nt(GM_ADDR a, GM_ADDR bt, GM_ADDR c, GM_ADDR tiling) {
  using T = IN_T;
  const __gm__ MatmulTiling* t = reinterpret_cast<__gm__ MatmulTiling*>(tiling);
  const uint32_t M = t->M, N = t->N, K = t->K, bm = t->baseM, bn = t->baseN, bk = t->baseK;
  GlobalTensor<T> gA, gB;
  gA.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(a), (uint64_t)M * K);
  gB.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(bt), (uint64_t)N * K);
  GlobalTensor<float> gC;
  GlobalTensor<bfloat16_t> gCb;
  gC.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(c), (uint64_t)M * N);
  gCb.SetGlobalBuffer(reinterpret_cast<__gm__ bfloat16_t*>(c), (uint64_t)M * N);

  TPipe pipe;
  CubeGemmNT<T> cube;
  cube.Init(pipe, bm, bn, bk);
  const uint32_t mTiles = (M + bm - 1) / bm, nTiles = (N + bn - 1) / bn;
  for (uint32_t tile = GetBlockIdx(); tile < mTiles * nTiles; tile += GetBlockNum()) {
    const uint32_t m0 = (tile / nTiles) * bm, n0 = (tile % nTiles) * bn;
    const uint32_t m = (M - m0 < bm) ? M - m0 : bm, n = (N - n0 < bn) ? N - n0 : bn;
    cube.Compute(gA, gB, K, m0, n0, m, n);
    if (t->outBf16) cube.Store(gCb[(uint64_t)m0 * N + n0], m, n, N, QuantMode_t::F322BF16);
    else cube.Store(gC[(uint64_t)m0 * N + n0], m, n, N, QuantMode_t::NoQuant);
  }
  cube.Finish();
}

#ifdef ASCENDC_EMU
#include "emu_driver.h"
// usage: matmul M N K baseM baseN baseK outBf16 numBlocks a.bin bt.bin c.bin
int main(int argc, char** argv) {
  MatmulTiling t{drv::arg(argc, argv, 1), drv::arg(argc, argv, 2), drv::arg(argc, argv, 3), drv::arg(argc, argv, 4),
                 drv::arg(argc, argv, 5), drv::arg(argc, argv, 6), drv::arg(argc, argv, 7)};
  uint32_t blocks = drv::arg(argc, argv, 8);
  auto a = drv::read_file(argv[9]);
  auto b = drv::read_file(argv[10]);
  size_t cbytes = (size_t)t.M * t.N * (t.outBf16 ? 2 : 4);
  std::vector<uint8_t> c(cbytes, 0xCD);
  emu::Launch(matmul_nt, blocks, emu::Mode::AIC_ONLY, a.data(), b.data(), c.data(), reinterpret_cast<uint8_t*>(&t));
  drv::write_file(argv[11], c.data(), cbytes);
  return 0;
}
#endif
