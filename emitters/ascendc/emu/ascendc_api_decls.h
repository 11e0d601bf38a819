// ascendc_api_decls.h -- spelling check from public documentation; not verified against CANN.
//
// Declarations ONLY (no behaviour) of the AscendC class-API subset that dgir's GEMM kernels use, transcribed
// from the signatures summarised in /work/shared/docs/ascendc.md (section 1.5).  Use it to check that a kernel
// uses the documented names and argument lists:
//     g++ -std=c++17 -fsyntax-only [-D__NPU_ARCH__=2201] -include ascendc_api_decls.h kernel.cpp
// Passing this check does NOT mean the kernel compiles with bisheng/CANN (the real headers need bisheng builtins).
#pragma once
#include <cstdint>

#ifndef __NPU_ARCH__
#define __NPU_ARCH__ 3510
#endif
#define ASCENDC_API_DECLS_ONLY 1

#define __aicore__
#define __global__
#define __gm__
#define __ubuf__
#define __cbuf__
#define __ca__
#define __cb__
#define __cc__
#define __cube__
#define __vector__
#define __inout_pipe__(x)
#define __mix__(a, b)
#define __schedmode__(x)
#define GM_ADDR __gm__ uint8_t*
namespace AscendC { namespace decls { bool is_aic(); } }
#define ASCEND_IS_AIC (::AscendC::decls::is_aic())
#define ASCEND_IS_AIV (!::AscendC::decls::is_aic())
#define ASCEND_IS_NOT_AIC (!::AscendC::decls::is_aic())
#define ASCEND_IS_NOT_AIV (::AscendC::decls::is_aic())
#define KERNEL_TASK_TYPE_DEFAULT(x)

struct bfloat16_t { uint16_t bits; bfloat16_t() = default; bfloat16_t(float f); operator float() const; };
struct half { uint16_t bits; half() = default; half(float f); operator float() const; };
struct fp8_e4m3fn_t { uint8_t bits; fp8_e4m3fn_t() = default; fp8_e4m3fn_t(float f); operator float() const; };
struct fp8_e5m2_t { uint8_t bits; fp8_e5m2_t() = default; fp8_e5m2_t(float f); operator float() const; };
struct fp8_e8m0_t { uint8_t bits; fp8_e8m0_t() = default; fp8_e8m0_t(float f); operator float() const; };
struct fp4x2_e2m1_t { uint8_t bits; };
struct fp4x2_e1m2_t { uint8_t bits; };
struct hifloat8_t { uint8_t bits; };

enum pipe_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_MTE4, PIPE_MTE5, PIPE_V2, PIPE_FIX };

namespace AscendC {
enum class TPosition : uint8_t { GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM, SPM, SHM, TSCM, C2PIPE2GM, MAX };
using QuePosition = TPosition;
using TEventID = int8_t;
enum class HardEvent : uint8_t {
  MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, M_V, V_M, V_V, MTE3_MTE1, MTE1_MTE3, MTE1_V, MTE2_M,
  M_MTE2, V_MTE1, M_FIX, FIX_M, MTE3_MTE2, MTE2_MTE3, S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S, MTE2_FIX, FIX_MTE2, FIX_S,
  M_S, FIX_MTE3, MTE1_FIX, FIX_MTE1, FIX_FIX, MAX
};
enum class RoundMode : uint8_t { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD, CAST_HYBRID, CAST_EVEN, CAST_ZERO };
enum class QuantMode_t : uint8_t {
  NoQuant, F322F16, F322BF16, DEQF16, VDEQF16, QF322B8_PRE, VQF322B8_PRE, REQ8, VREQ8,
  QF322FP8_PRE, VQF322FP8_PRE, QF322HIF8_PRE, VQF322HIF8_PRE, QF322HIF8_PRE_HYBRID, VQF322HIF8_PRE_HYBRID,
  QS322BF16_PRE, VQS322BF16_PRE, QF322F16_PRE, VQF322F16_PRE, QF322BF16_PRE, VQF322BF16_PRE, QF322F32_PRE, VQF322F32_PRE
};

template <typename T> class GlobalTensor {
 public:
  __aicore__ GlobalTensor();
  __aicore__ void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize);
  __aicore__ void SetGlobalBuffer(__gm__ T* buffer);
  __aicore__ GlobalTensor operator[](const uint64_t offset) const;
  __aicore__ const __gm__ T* GetPhyAddr() const;
  __aicore__ __gm__ T* GetPhyAddr(const uint64_t offset) const;
  __aicore__ uint64_t GetSize() const;
  __aicore__ T GetValue(const uint64_t offset) const;
  __aicore__ void SetValue(const uint64_t offset, T value) const;
};
template <typename T> class LocalTensor {
 public:
  __aicore__ LocalTensor();
  __aicore__ LocalTensor(TPosition pos, uint32_t addr, uint32_t tileSize);
  __aicore__ LocalTensor operator[](const uint32_t offset) const;
  __aicore__ uint32_t GetSize() const;
  __aicore__ uint32_t GetLength() const;
  __aicore__ void SetSize(const uint32_t size);
  __aicore__ uint64_t GetPhyAddr() const;
  __aicore__ TPosition GetPosition() const;
  template <typename U> __aicore__ LocalTensor<U> ReinterpretCast() const;
  __aicore__ T GetValue(const uint32_t index) const;
  __aicore__ void SetValue(const uint32_t index, const T& value) const;
};

template <TPosition src, TPosition dst, int32_t depth, auto mask = 0> class TQueBind {
 public:
  __aicore__ TQueBind();
  template <typename T> __aicore__ LocalTensor<T> AllocTensor();
  template <typename T> __aicore__ void FreeTensor(LocalTensor<T>& tensor);
  template <typename T> __aicore__ bool EnQue(const LocalTensor<T>& tensor);
  template <typename T> __aicore__ LocalTensor<T> DeQue();
  __aicore__ bool VacantInQue();
  __aicore__ bool HasTensorInQue();
  __aicore__ int32_t GetTensorCountInQue();
  __aicore__ void FreeAllEvent();
};
template <TPosition pos, int32_t depth, auto mask = 0> class TQue : public TQueBind<pos, pos, depth, mask> {};
template <TPosition pos = TPosition::LCM> class TBuf {
 public:
  template <typename T> __aicore__ LocalTensor<T> Get();
  template <typename T> __aicore__ LocalTensor<T> Get(uint32_t len);
  template <typename T> __aicore__ LocalTensor<T> GetWithOffset(uint32_t size, uint32_t bufOffset);
};
class TPipe {
 public:
  __aicore__ TPipe();
  __aicore__ void Init();
  template <class T> __aicore__ bool InitBuffer(T& que, uint8_t num, uint32_t len);
  template <TPosition pos> __aicore__ bool InitBuffer(TBuf<pos>& buf, uint32_t len);
  template <HardEvent evt> __aicore__ TEventID AllocEventID();
  template <HardEvent evt> __aicore__ void ReleaseEventID(TEventID id);
  template <HardEvent evt> __aicore__ TEventID FetchEventID();
  __aicore__ void Destroy();
  __aicore__ void Reset();
};

#if __NPU_ARCH__ == 2201
struct Nd2NzParams {
  uint16_t ndNum, nValue, dValue, srcNdMatrixStride, srcDValue, dstNzC0Stride, dstNzNStride, dstNzMatrixStride;
  __aicore__ Nd2NzParams();
  __aicore__ Nd2NzParams(uint16_t ndNum, uint16_t nValue, uint16_t dValue, uint16_t srcNdMatrixStride, uint16_t srcDValue,
                         uint16_t dstNzC0Stride, uint16_t dstNzNStride, uint16_t dstNzMatrixStride);
};
#else
struct Nd2NzParams {
  uint16_t ndNum, nValue; uint32_t dValue; uint64_t srcNdMatrixStride, srcDValue; uint16_t dstNzC0Stride, dstNzNStride; uint32_t dstNzMatrixStride;
  __aicore__ Nd2NzParams();
  __aicore__ Nd2NzParams(uint16_t ndNum, uint16_t nValue, uint32_t dValue, uint64_t srcNdMatrixStride, uint64_t srcDValue,
                         uint16_t dstNzC0Stride, uint16_t dstNzNStride, uint32_t dstNzMatrixStride);
};
#endif
#if __NPU_ARCH__ == 3510
struct Dn2NzParams {
  uint16_t dnNum, nValue; uint32_t dValue; uint64_t srcDnMatrixStride, srcDValue; uint16_t dstNzC0Stride, dstNzNStride; uint32_t dstNzMatrixStride;
  __aicore__ Dn2NzParams();
  __aicore__ Dn2NzParams(uint16_t dnNum, uint16_t nValue, uint32_t dValue, uint64_t srcDnMatrixStride, uint64_t srcDValue,
                         uint16_t dstNzC0Stride, uint16_t dstNzNStride, uint32_t dstNzMatrixStride);
};
#endif
template <typename T> struct InitConstValueParams {
  uint16_t repeatTimes, blockNum, dstGap; T initValue;
  __aicore__ InitConstValueParams();
  __aicore__ InitConstValueParams(const uint16_t repeatTimes, const uint16_t blockNum, const uint16_t dstGap, const T initValue);
  __aicore__ InitConstValueParams(const uint16_t repeatTimes, const T initValue);
};
struct DataCopyParams {
  uint16_t blockCount, blockLen, srcStride, dstStride;
  __aicore__ DataCopyParams();
  __aicore__ DataCopyParams(uint16_t count, uint16_t len, uint16_t srcStride, uint16_t dstStride);
};
struct DataCopyExtParams {
  uint16_t blockCount; uint32_t blockLen, srcStride, dstStride, rsv;
  __aicore__ DataCopyExtParams();
  __aicore__ DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStride, const uint32_t dstStride, const uint32_t rsv);
};
struct LoadData2DParams {
  uint16_t startIndex, dstGap, srcStride; bool ifTranspose; uint8_t repeatTimes, sid, addrMode;
  __aicore__ LoadData2DParams();
  __aicore__ LoadData2DParams(uint16_t startIndex, uint8_t repeatTimes, uint16_t srcStride, uint8_t sid, uint16_t dstGap, bool ifTranspose, uint8_t addrMode);
};
struct LoadData2DParamsV2 {
  uint32_t mStartPosition, kStartPosition; uint16_t mStep, kStep; int32_t srcStride; uint16_t dstStride; bool ifTranspose; uint8_t sid;
  __aicore__ LoadData2DParamsV2();
  __aicore__ LoadData2DParamsV2(uint32_t mStartPosition, uint32_t kStartPosition, uint16_t mStep, uint16_t kStep, int32_t srcStride,
                                uint16_t dstStride, bool ifTranspose, uint8_t sid);
};
struct LoadData2DMxParams {
  uint16_t xStartPosition, yStartPosition; uint8_t xStep, yStep; uint16_t srcStride, dstStride;
  __aicore__ LoadData2DMxParams();
  __aicore__ LoadData2DMxParams(uint16_t xStartPosition, uint16_t yStartPosition, uint8_t xStep, uint8_t yStep, uint16_t srcStride, uint16_t dstStride);
};
struct MmadParams {
  uint16_t m, n, k; bool isBias; int32_t fmOffset; bool enSsparse, enWinogradA, enWinogradB; uint8_t unitFlag;
  bool kDirectionAlign, cmatrixSource, cmatrixInitVal;
#if __NPU_ARCH__ == 3510
  bool disableGemv;
#endif
  __aicore__ MmadParams();
  __aicore__ MmadParams(uint16_t m, uint16_t n, uint16_t k, uint8_t unitFlag, bool cmatrixSource, bool cmatrixInitVal);
  __aicore__ MmadParams(uint16_t m, uint16_t n, uint16_t k, bool isBias, int32_t fmOffset, bool enSsparse, bool enWinogradA, bool enWinogradB);
};
struct FixpipeParamsV220 {
  uint16_t nSize, mSize, srcStride; uint32_t dstStride; QuantMode_t quantPre; uint64_t deqScalar;
  uint16_t ndNum, srcNdStride, dstNdStride; bool reluEn; uint8_t unitFlag; bool isChannelSplit;
  __aicore__ FixpipeParamsV220();
  __aicore__ FixpipeParamsV220(uint16_t nSize, uint16_t mSize, uint16_t srcStride, uint32_t dstStride, bool reluEn);
  __aicore__ FixpipeParamsV220(uint16_t nSize, uint16_t mSize, uint16_t srcStride, uint32_t dstStride, bool reluEn, QuantMode_t quantPre,
                               int64_t deqScalar, uint16_t ndNum, uint16_t srcNdStride, uint16_t dstNdStride, uint8_t unitFlag);
};
enum class CO2Layout : uint8_t { NZ = 0, ROW_MAJOR, COLUMN_MAJOR };
struct FixpipeConfig { CO2Layout format; };
inline constexpr FixpipeConfig CFG_NZ = {CO2Layout::NZ};
inline constexpr FixpipeConfig CFG_ROW_MAJOR = {CO2Layout::ROW_MAJOR};
#if __NPU_ARCH__ == 3510
inline constexpr FixpipeConfig CFG_COLUMN_MAJOR = {CO2Layout::COLUMN_MAJOR};
template <CO2Layout format = CO2Layout::ROW_MAJOR> struct FixpipeParamsArch3510 : FixpipeParamsV220 {
  uint8_t dualDstCtl; bool subBlockId;
  using FixpipeParamsV220::FixpipeParamsV220;
  __aicore__ FixpipeParamsArch3510();
};
#endif

// ---- data movement
template <typename T> __aicore__ void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const Nd2NzParams& intriParams);
#if __NPU_ARCH__ == 3510
template <typename T, bool enableSmallC0 = false> __aicore__ void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const Dn2NzParams& intriParams);
#endif
template <typename T> __aicore__ void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t calCount);
template <typename T> __aicore__ void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t calCount);
template <typename T> __aicore__ void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t calCount);
template <typename T> __aicore__ void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& repeatParams);
template <typename T> __aicore__ void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& repeatParams);
template <typename T> __aicore__ void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& dataCopyParams);
template <typename T> __aicore__ void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LoadData2DParams& loadDataParams);
#if __NPU_ARCH__ == 2201
template <typename T> __aicore__ void LoadData(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const LoadData2DParams& loadDataParams);
#else
template <typename T> __aicore__ void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LoadData2DParamsV2& loadDataParams);
template <typename T, typename U> __aicore__ void LoadData(const LocalTensor<U>& dst, const LocalTensor<T>& src, const LocalTensor<fp8_e8m0_t>& srcMx,
                                                           const LoadData2DParamsV2& loadDataParams, const LoadData2DMxParams& loadMxDataParams);
#endif
template <typename T, typename U = T> __aicore__ void InitConstValue(const LocalTensor<T>& dst, const InitConstValueParams<U>& initConstValueParams);
// ---- cube
template <typename T, typename U, typename S>
__aicore__ void Mmad(const LocalTensor<T>& dst, const LocalTensor<U>& fm, const LocalTensor<S>& filter, const MmadParams& mmadParams);
template <typename T, typename U, typename S, typename V>
__aicore__ void Mmad(const LocalTensor<T>& dst, const LocalTensor<U>& fm, const LocalTensor<S>& filter, const LocalTensor<V>& bias, const MmadParams& mmadParams);
#if __NPU_ARCH__ == 3510
template <typename T, typename U, typename S>
__aicore__ void MmadMx(const LocalTensor<T>& dst, const LocalTensor<U>& fm, const LocalTensor<S>& filter, const MmadParams& mmadParams);
#endif
template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR>
__aicore__ void Fixpipe(const GlobalTensor<T>& dst, const LocalTensor<U>& src, const FixpipeParamsV220& intriParams);
template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR>
__aicore__ void Fixpipe(const GlobalTensor<T>& dst, const LocalTensor<U>& src, const LocalTensor<uint64_t>& cbufWorkspace, const FixpipeParamsV220& intriParams);
#if __NPU_ARCH__ == 3510
template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR>
__aicore__ void Fixpipe(const GlobalTensor<T>& dst, const LocalTensor<U>& src, const FixpipeParamsArch3510<config.format>& intriParams);
#endif
// ---- vector (count form)
template <typename T> __aicore__ void Add(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count);
template <typename T> __aicore__ void Sub(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count);
template <typename T> __aicore__ void Mul(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count);
template <typename T> __aicore__ void Div(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count);
template <typename T> __aicore__ void Max(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count);
template <typename T> __aicore__ void Min(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count);
template <typename T, bool isSetMask = true> __aicore__ void Muls(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count);
template <typename T, bool isSetMask = true> __aicore__ void Adds(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count);
template <typename T, bool isSetMask = true> __aicore__ void Maxs(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count);
template <typename T> __aicore__ void Exp(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count);
template <typename T> __aicore__ void Relu(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count);
template <typename T, typename U> __aicore__ void Axpy(const LocalTensor<T>& dst, const LocalTensor<U>& src, const U scalarValue, const int32_t& count);
template <typename T> __aicore__ void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count);
template <typename T, typename U> __aicore__ void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& round_mode, const uint32_t count);
// ---- sync
template <HardEvent evt> __aicore__ void SetFlag(int32_t eventID);
template <HardEvent evt> __aicore__ void WaitFlag(int32_t eventID);
template <pipe_t pipe> __aicore__ void PipeBarrier();
template <uint8_t modeId, pipe_t pipe> __aicore__ void CrossCoreSetFlag(uint16_t flagId);
template <uint8_t modeId = 0, pipe_t pipe = PIPE_S> __aicore__ void CrossCoreWaitFlag(uint16_t flagId);
template <bool isAIVOnly = true> __aicore__ void SyncAll();
// ---- system variables
__aicore__ int64_t GetBlockIdx();
__aicore__ int64_t GetBlockNum();
__aicore__ int64_t GetSubBlockIdx();
__aicore__ int64_t GetSubBlockNum();
__aicore__ int64_t GetTaskRatio();
}  // namespace AscendC
