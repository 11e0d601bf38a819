// Shared AIC routine for the test kernels: one C tile (m x n) = A[m0:, :K] * Bt[n0:, :K]^T ("NT": B given as N x K,
// K contiguous, as DeepGEMM does), single-buffered GM->L1 (ND->NZ) -> L0A/L0B -> Mmad (L0C fp32) -> Fixpipe.
// Hand-written against the documented AscendC class API (see ascendc.md section 1.5); arch-specific loads.
#pragma once

template <typename T> struct CubeGemmNT {
  static constexpr uint32_t C0 = 32 / sizeof(T);  // elements per 32 B (fractal width)
  uint32_t bm = 0, bn = 0, bk = 0;
  AscendC::TBuf<AscendC::TPosition::A1> l1a;
  AscendC::TBuf<AscendC::TPosition::B1> l1b;
  AscendC::TBuf<AscendC::TPosition::A2> l0a;
  AscendC::TBuf<AscendC::TPosition::B2> l0b;
  AscendC::TBuf<AscendC::TPosition::CO1> l0c;
  AscendC::LocalTensor<T> A1, B1, A2, B2;
  AscendC::LocalTensor<float> C;

  __aicore__ inline void Init(AscendC::TPipe& pipe, uint32_t bm_, uint32_t bn_, uint32_t bk_) {
    using namespace AscendC;
    bm = bm_; bn = bn_; bk = bk_;
    pipe.InitBuffer(l1a, bm * bk * sizeof(T));
    pipe.InitBuffer(l1b, bn * bk * sizeof(T));
    pipe.InitBuffer(l0a, bm * bk * sizeof(T));
    pipe.InitBuffer(l0b, bn * bk * sizeof(T));
    pipe.InitBuffer(l0c, bm * bn * sizeof(float));
    A1 = l1a.Get<T>(); B1 = l1b.Get<T>(); A2 = l0a.Get<T>(); B2 = l0b.Get<T>(); C = l0c.Get<float>();
    // buffers start free: pre-set the reverse (WAR) events
    SetFlag<HardEvent::MTE1_MTE2>(0);
    SetFlag<HardEvent::M_MTE1>(0);
    SetFlag<HardEvent::FIX_M>(0);
  }
  __aicore__ inline void Finish() {
    using namespace AscendC;
    WaitFlag<HardEvent::MTE1_MTE2>(0);
    WaitFlag<HardEvent::M_MTE1>(0);
    WaitFlag<HardEvent::FIX_M>(0);
  }
  // C tile into L0C (left there, ordered for FIX by M_FIX)
  __aicore__ inline void Compute(const AscendC::GlobalTensor<T>& gA, const AscendC::GlobalTensor<T>& gB, uint32_t K, uint32_t m0,
                                 uint32_t n0, uint32_t m, uint32_t n) {
    using namespace AscendC;
    const uint32_t M1 = (m + 15) / 16, N1 = (n + 15) / 16;
    const uint32_t kTiles = (K + bk - 1) / bk;
    for (uint32_t kt = 0; kt < kTiles; ++kt) {
      const uint32_t k0 = kt * bk, k = (K - k0 < bk) ? K - k0 : bk;
      const uint32_t K1 = (k + C0 - 1) / C0;
#ifndef DROP_WAIT_MTE1_MTE2
      WaitFlag<HardEvent::MTE1_MTE2>(0);  // L1 no longer read by the previous LoadData
#endif
      DataCopy(A1, gA[(uint64_t)m0 * K + k0], Nd2NzParams(1, m, k, 0, K, M1 * 16, 1, 0));
      DataCopy(B1, gB[(uint64_t)n0 * K + k0], Nd2NzParams(1, n, k, 0, K, N1 * 16, 1, 0));
      SetFlag<HardEvent::MTE2_MTE1>(0);
#ifndef DROP_WAIT_MTE2_MTE1
      WaitFlag<HardEvent::MTE2_MTE1>(0);
#endif
      WaitFlag<HardEvent::M_MTE1>(0);  // L0A/L0B no longer read by the previous Mmad
#if __NPU_ARCH__ == 2201
      // L0A is Zz on 2201: gather each 16-row band's K1 fractals (stride M1 in the Nz L1 tile)
      for (uint32_t i = 0; i < M1; ++i) LoadData(A2[i * K1 * 16 * C0], A1, LoadData2DParams(i, K1, M1, 0, 0, false, 0));
      // B^T in Nz (N1 fractals per column group) is already the Zn order L0B needs
      LoadData(B2, B1, LoadData2DParams(0, K1 * N1, 1, 0, 0, false, 0));
#else
      // L0A is Nz on 3510, L0B Zn: both are straight (mStep x kStep) fractal block copies
      LoadData(A2, A1, LoadData2DParamsV2(0, 0, M1, K1, M1, M1, false, 0));
      LoadData(B2, B1, LoadData2DParamsV2(0, 0, N1, K1, N1, N1, false, 0));
#endif
#ifndef DROP_SET_MTE1_MTE2
      SetFlag<HardEvent::MTE1_MTE2>(0);
#endif
      SetFlag<HardEvent::MTE1_M>(0);
      WaitFlag<HardEvent::MTE1_M>(0);
      if (kt == 0) WaitFlag<HardEvent::FIX_M>(0);  // L0C drained by the previous Fixpipe
      MmadParams mp(m, n, k, 0, false, kt == 0);
      Mmad(C, A2, B2, mp);
      if (M1 * N1 < 10) PipeBarrier<PIPE_M>();
      SetFlag<HardEvent::M_MTE1>(0);
    }
    SetFlag<HardEvent::M_FIX>(0);
    WaitFlag<HardEvent::M_FIX>(0);
  }
  template <typename OUT>
  __aicore__ inline void Store(const AscendC::GlobalTensor<OUT>& dst, uint32_t m, uint32_t n, uint32_t ldc, AscendC::QuantMode_t q) {
    using namespace AscendC;
    const uint32_t M1 = (m + 15) / 16;
    Fixpipe(dst, C, FixpipeParamsV220(n, m, M1 * 16, ldc, false, q, 0, 1, 0, 0, 0));
    SetFlag<HardEvent::FIX_M>(0);
  }
};
