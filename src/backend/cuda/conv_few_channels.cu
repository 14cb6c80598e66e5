#include "backend/cuda/conv_few_channels.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"

namespace dpl::backend::cuda_detail {

namespace {

// Both kernels walk the output in tiles of 16x16 pixels of one image. A row of a tile is 16
// consecutive pixels, exactly the 16 rows (forward) or the 16-long reduction (weight gradient) of
// one m16n8k16 tensor-core instruction, so each pixel of an instruction reads its window at a
// fixed distance from the row's first window in the tile's input patch.
constexpr int kTile = 16;
constexpr int kWarps = kThreads / 32;
// The input patch a tile reads, (15 * stride + K) pixels square, is copied into shared memory
// once per tile; each thread moves up to kPatchSlots of its pixels, so patches are bounded.
constexpr int kPatchSlots = 6;
constexpr int kMaxPatch = kThreads * kPatchSlots;
constexpr int kMaxPositions = 128;
// Output channels per block (the grid's y covers the rest); the weight gradient's block also
// takes at most kChunkK weight columns (KH*KW*C), the grid's z the rest.
constexpr int kChunkO = 64;
constexpr int kChunkK = 160;
// The weight gradient's warps: kGroupsK split the weight columns, two split the tile's rows.
constexpr int kGroupsK = 4;
constexpr int kTilesK = kChunkK / 8 / kGroupsK;  // n8 tiles of weight columns per warp

struct Geometry {
  int n, h, w, c;  // input
  int o, oh, ow;   // output channels and extents
  int kh, kw, sh, sw, ph, pw;
  int pr, pc;      // the rows and columns of a tile's input patch
  unsigned pc_magic;  // ceil(2^32 / pc): e / pc = __umulhi(e, pc_magic) for every e of a patch
  int tiles_x, tiles_y, tiles;
  int positions;   // kh * kw
};

// --- tensor-core and asynchronous-copy instructions (sm_80 and newer) --------------------------

template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // conv_few_channels_fits refuses these GPUs
#else
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#endif
}

// d += a * b over k = 8 with TF32 operands (float32 registers rounded by to_tf32) and float32
// accumulation. A (16 x 8): a[0] (row gid, col t), a[1] (row gid + 8, col t), a[2] (row gid,
// col t + 4), a[3] (row gid + 8, col t + 4); B (8 x 8): b0 (row t, col gid), b1 (row t + 4, col
// gid); d as for mma_16816.
__device__ __forceinline__ void mma_1688_tf32(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                              std::uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// v rounded to TF32 (to nearest, ties away from zero, as cuDNN and cuBLAS round their TF32
// operands), as the instruction's 32-bit operand.
__device__ __forceinline__ std::uint32_t to_tf32(float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
  return 0u;
#else
  std::uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
  return r;
#endif
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
__device__ __forceinline__ std::uint32_t shared_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
#endif

__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
#endif
}

// 16 bytes from global to shared memory without passing through registers; bytes < 16 zero-fills
// the rest (0: all zeros, src not read).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src), "r"(bytes)
               : "memory");
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most N of this thread's committed groups of copies are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait_groups() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// Two floats rounded to T and packed as the instruction's operands and the stores expect them:
// the lower index in the lower half.
template <typename T>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  std::uint32_t r;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    std::memcpy(&r, &v, 4);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    std::memcpy(&r, &v, 4);
  }
  return r;
}

// --- the input patch --------------------------------------------------------------------------
// A tile's patch lies in shared memory as (row, column, 4 channels) with channels past C zero:
// 8 bytes a pixel in 16-bit types, 16 in float32, so that the four channels of one window
// position are one aligned load wherever the window stands. Each thread owns the patch pixels
// tid + kThreads*i.

// What the element type T changes in both kernels: bfloat16 and float16 are stored and moved as
// 16-bit words; float32 (multiplied as TF32) as floats, rounded to TF32 where they enter shared
// memory or an instruction.
template <typename T>
struct Element {
  static constexpr bool kTf32 = std::is_same_v<T, float>;
  using Stored = std::conditional_t<kTf32, float, std::uint16_t>;  // as the tensors hold it
  using Pixel = std::conditional_t<kTf32, uint4, uint2>;             // four channels
  static constexpr int kBytes = sizeof(Stored);
  static constexpr int kPixelBytes = sizeof(Pixel);
};

// The c <= 4 channels at p as one patch pixel (or weight position), zeros past c.
template <typename T>
__device__ __forceinline__ typename Element<T>::Pixel load_pixel(const typename Element<T>::Stored* p, int c) {
  if constexpr (Element<T>::kTf32) {
    return make_uint4(to_tf32(p[0]), c > 1 ? to_tf32(p[1]) : 0u, c > 2 ? to_tf32(p[2]) : 0u,
                      c > 3 ? to_tf32(p[3]) : 0u);
  } else {
    const std::uint32_t c0 = p[0], c1 = c > 1 ? p[1] : 0u, c2 = c > 2 ? p[2] : 0u, c3 = c > 3 ? p[3] : 0u;
    return make_uint2(c0 | c1 << 16, c2 | c3 << 16);
  }
}

struct TileAt {
  int img, oy0, ox0;
};

__device__ __forceinline__ TileAt tile_at(const Geometry& g, int tile) {
  const int tx = tile % g.tiles_x, rest = tile / g.tiles_x;
  return {rest / g.tiles_y, (rest % g.tiles_y) * kTile, tx * kTile};
}

// Loads this thread's patch pixels of the tile at `at` into registers (zeros outside the image),
// so that the loads of the next tile are in flight while the current one computes. The division
// by the patch width is a multiply-high: a real division per pixel and tile cost a quarter of the
// products' instructions.
template <typename T, typename Index>
__device__ __forceinline__ void fetch_patch(const typename Element<T>::Stored* __restrict__ x, const Geometry& g,
                                            const TileAt& at, typename Element<T>::Pixel (&v)[kPatchSlots]) {
  const int iy0 = at.oy0 * g.sh - g.ph, ix0 = at.ox0 * g.sw - g.pw;
#pragma unroll
  for (int i = 0; i < kPatchSlots; ++i) {
    v[i] = {};
    const unsigned e = threadIdx.x + kThreads * i;
    const int row = static_cast<int>(__umulhi(e, g.pc_magic)), col = static_cast<int>(e) - row * g.pc;
    const int iy = iy0 + row, ix = ix0 + col;
    if (row >= g.pr || iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
    v[i] = load_pixel<T>(x + ((static_cast<Index>(at.img) * static_cast<Index>(g.h) + static_cast<Index>(iy)) *
                                  static_cast<Index>(g.w) +
                              static_cast<Index>(ix)) *
                                 static_cast<Index>(g.c),
                         g.c);
  }
}

template <typename Pixel>
__device__ __forceinline__ void store_patch(Pixel* patch, int patch_pixels, const Pixel (&v)[kPatchSlots]) {
#pragma unroll
  for (int i = 0; i < kPatchSlots; ++i) {
    const int e = static_cast<int>(threadIdx.x) + kThreads * i;
    if (e < patch_pixels) patch[e] = v[i];
  }
}

// --- forward ----------------------------------------------------------------------------------
// y[pixel][o] = sum over k of A[pixel][k] * W[o][k], k running over (window position, channel)
// with the channels padded to 4. In 16-bit types each thread's four k values of an m16n8k16
// instruction (2t, 2t+1, 2t+8, 2t+9) are taken to be the four channels of window position
// 4*step + t, so both operands come from one 8-byte load each (the patch for A, the weights in
// shared memory for B). In float32 (TF32) a step is two m16n8k8 instructions, each over two
// positions: thread t's k values t and t + 4 are channels 2(t & 1) and 2(t & 1) + 1 of position
// 4*step + 2h + (t >> 1) in the h-th, in A and B alike, again one 8-byte load each. Positions past
// KH*KW read zeros. Each warp computes two tile rows (two 16-pixel operands) against NT*8 output
// channels, reusing every weight fragment twice; the whole block's weights stay in shared memory
// for all its tiles (blocks are persistent), and the next tile's patch is loaded during the
// current tile's products. The results go through a per-warp staging area so that each pixel's
// channels leave as 16-byte stores.

struct ForwardLayout {
  int ksteps;    // instruction steps along k: four window positions each
  int w_stride;  // bytes per output channel of the weights in shared memory
  int stage_row; // bytes per pixel of the staging area
  int table, patch, stage, bytes;  // byte offsets of the parts, and the total
};

template <typename T>
__host__ __device__ inline ForwardLayout forward_layout(const Geometry& g, int nt) {
  using E = Element<T>;
  ForwardLayout l{};
  l.ksteps = (g.positions + 3) / 4;
  const int w_row = l.ksteps * 4 * E::kPixelBytes;
  if constexpr (E::kTf32) {
    // Rows of 32 mod 128 bytes: the four output channels a half-warp's 8-byte loads read (32
    // bytes each) land in distinct banks; the staging rows likewise.
    l.w_stride = w_row + (w_row % 128 == 0 ? 32 : 96);
    l.stage_row = nt * 32 + 32;
  } else {
    // A row stride of 32 mod 64 bytes puts the four rows a quarter-warp reads in distinct banks.
    l.w_stride = w_row + (w_row % 64 == 0 ? 32 : 0);
    l.stage_row = nt * 16 + 16;  // padded likewise, for the staging stores
  }
  l.table = nt * 8 * l.w_stride;
  l.patch = l.table + ((l.ksteps * 4 * 4 + 15) / 16) * 16;
  l.stage = l.patch + 2 * g.pr * g.pc * E::kPixelBytes;
  l.bytes = l.stage + kWarps * kTile * l.stage_row;
  return l;
}

// Two 16-bit blocks a multiprocessor; one float32 block (its shared memory is twice the size).
template <typename T, int NT, typename Index>
__global__ void __launch_bounds__(kThreads, Element<T>::kTf32 ? 1 : 2)
    conv_forward_kernel(const typename Element<T>::Stored* __restrict__ x,
                        const typename Element<T>::Stored* __restrict__ w, Geometry g,
                        typename Element<T>::Stored* __restrict__ y) {
  using E = Element<T>;
  using Pixel = typename E::Pixel;
  extern __shared__ __align__(16) unsigned char smem[];
  const ForwardLayout l = forward_layout<T>(g, NT);
  unsigned char* const wsm = smem;
  int* const table = reinterpret_cast<int*>(smem + l.table);
  Pixel* const patch = reinterpret_cast<Pixel*>(smem + l.patch);
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int gid = lane >> 2, t4 = lane & 3;
  unsigned char* const stage = smem + l.stage + warp * kTile * l.stage_row;
  const int patch_pixels = g.pr * g.pc;
  const int oc0 = static_cast<int>(blockIdx.y) * NT * 8;
  int tile = static_cast<int>(blockIdx.x);

  for (int i = tid; i < NT * 8 * l.ksteps * 4; i += kThreads) {
    const int n = i / (l.ksteps * 4), q = i % (l.ksteps * 4);
    const std::int64_t at = (static_cast<std::int64_t>(oc0 + n) * g.positions + q) * g.c;
    *reinterpret_cast<Pixel*>(wsm + n * l.w_stride + q * E::kPixelBytes) =
        q < g.positions ? load_pixel<T>(w + at, g.c) : Pixel{};
  }
  for (int q = tid; q < l.ksteps * 4; q += kThreads)
    table[q] = q < g.positions ? ((q / g.kw) * g.pc + q % g.kw) * E::kPixelBytes : 0;

  Pixel fetched[kPatchSlots];
  fetch_patch<T, Index>(x, g, tile_at(g, tile), fetched);
  store_patch(patch, patch_pixels, fetched);
  __syncthreads();

  // Byte offsets in a patch of the window origins of this thread's pixels: gid of row 2*warp + mt
  // (the operand's rows gid), and 8 pixels further along (rows gid + 8); in float32 also this
  // thread's channel pair within the pixel.
  int origin[2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
    origin[mt] = ((2 * warp + mt) * g.sh * g.pc + gid * g.sw) * E::kPixelBytes + (E::kTf32 ? (t4 & 1) * 8 : 0);
  const int eight_along = 8 * g.sw * E::kPixelBytes;
  // A's registers for rows gid and gid + 8 from the 8-byte loads at window position q (byte offset
  // off); zeros past the window, whose weights are zero (x there may hold anything).
  const auto operand_a = [&](const unsigned char* pb, int q, int off, std::uint32_t (&a)[2][4]) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      uint2 lo = *reinterpret_cast<const uint2*>(pb + origin[mt] + off);
      uint2 hi = *reinterpret_cast<const uint2*>(pb + origin[mt] + eight_along + off);
      if (q >= g.positions) lo = hi = make_uint2(0u, 0u);
      a[mt][0] = lo.x;
      a[mt][1] = hi.x;
      a[mt][2] = lo.y;
      a[mt][3] = hi.y;
    }
  };

  for (int buf = 0; tile < g.tiles; tile += static_cast<int>(gridDim.x), buf ^= 1) {
    const int next = tile + static_cast<int>(gridDim.x);
    if (next < g.tiles) fetch_patch<T, Index>(x, g, tile_at(g, next), fetched);
    const auto* pb = reinterpret_cast<const unsigned char*>(patch + buf * patch_pixels);
    float acc[2][NT][4] = {};
    for (int s = 0; s < l.ksteps; ++s) {
      if constexpr (E::kTf32) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int q = 4 * s + 2 * h + (t4 >> 1);
          std::uint32_t a[2][4];
          operand_a(pb, q, table[q], a);
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            // Position q's channel pair of output channel 8j + gid: 64s + 32h + 16(t4 >> 1) + 8(t4 & 1).
            const uint2 b =
                *reinterpret_cast<const uint2*>(wsm + (8 * j + gid) * l.w_stride + s * 64 + h * 32 + t4 * 8);
            mma_1688_tf32(acc[0][j], a[0], b.x, b.y);
            mma_1688_tf32(acc[1][j], a[1], b.x, b.y);
          }
        }
      } else {
        const int q = 4 * s + t4;
        std::uint32_t a[2][4];
        operand_a(pb, q, table[q], a);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const uint2 b = *reinterpret_cast<const uint2*>(wsm + (8 * j + gid) * l.w_stride + s * 32 + t4 * 8);
          mma_16816<T>(acc[0][j], a[0], b.x, b.y);
          mma_16816<T>(acc[1][j], a[1], b.x, b.y);
        }
      }
    }

    const TileAt at = tile_at(g, tile);
    constexpr int kPer = 16 / E::kBytes;  // channels a 16-byte store moves
    constexpr int kParts = NT * 8 / kPer;  // such stores a pixel
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const int oy = at.oy0 + 2 * warp + mt;
      if (oy >= g.oh) continue;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        if constexpr (E::kTf32) {
          *reinterpret_cast<float2*>(stage + gid * l.stage_row + j * 32 + t4 * 8) =
              make_float2(acc[mt][j][0], acc[mt][j][1]);
          *reinterpret_cast<float2*>(stage + (gid + 8) * l.stage_row + j * 32 + t4 * 8) =
              make_float2(acc[mt][j][2], acc[mt][j][3]);
        } else {
          *reinterpret_cast<std::uint32_t*>(stage + gid * l.stage_row + j * 16 + t4 * 4) =
              pack2<T>(acc[mt][j][0], acc[mt][j][1]);
          *reinterpret_cast<std::uint32_t*>(stage + (gid + 8) * l.stage_row + j * 16 + t4 * 4) =
              pack2<T>(acc[mt][j][2], acc[mt][j][3]);
        }
      }
      __syncwarp();
      const Index row = (static_cast<Index>(at.img) * static_cast<Index>(g.oh) + static_cast<Index>(oy)) *
                        static_cast<Index>(g.ow);
#pragma unroll
      for (int e = lane; e < kTile * kParts; e += 32) {
        const int px = e / kParts, part = e % kParts;
        const int ox = at.ox0 + px;
        if (ox >= g.ow) continue;
        const uint4 v = *reinterpret_cast<const uint4*>(stage + px * l.stage_row + part * 16);
        *reinterpret_cast<uint4*>(y + (row + static_cast<Index>(ox)) * static_cast<Index>(g.o) + oc0 + part * kPer) =
            v;
      }
      __syncwarp();
    }

    if (next < g.tiles) store_patch(patch + (buf ^ 1) * patch_pixels, patch_pixels, fetched);
    __syncthreads();
  }
}

// --- weight gradient --------------------------------------------------------------------------
// gw[o][k] = sum over pixels of gy[pixel][o] * A[pixel][k], the pixels being the instruction's
// reduction: o is its 16 rows (gy, staged by asynchronous copies and loaded transposed with
// ldmatrix), k = (window position, channel) its 8 columns, C channels unpadded; the B operand
// pairs two pixels of one k, which lie apart in the patch, so it is gathered 16 bits at a time.
// Warp (pixel group pg, column group kg) takes the tile rows of parity pg and the n8 column tiles
// kg, kg + 4, ... against all 64 output channels of the block: 80 float32 sums per thread, which
// with the prefetched patch need about 160 registers, so one block runs per SM; gy is staged
// kGyStages tiles deep so that enough of it is in flight to keep the memory busy. Blocks are
// persistent over a fixed set of tiles; their float32 sums go to a scratch row per block, which a
// second kernel adds up in block order, so the result does not depend on timing.

// What the element type changes here beyond Element: in float32 (TF32) gy is staged as float32
// and read with plain loads (ldmatrix moves 16-bit elements only), 16 pixels take two m16n8k8
// instructions, and two gy stages are in flight instead of three (a stage is twice the bytes).
template <typename T>
struct WgradTraits : Element<T> {
  using Element<T>::kTf32;
  using Element<T>::kBytes;
  // Elements per pixel row of a staged gy tile: 64 channels and a pad that puts the rows a
  // quarter-warp reads in distinct banks (ldmatrix's 8 rows; the float loads' 4 pixel pairs).
  static constexpr int kGyRow = kTf32 ? 68 : 72;
  static constexpr int kGyStages = kTf32 ? 2 : 3;
  static constexpr int kGyBytes = kTile * kTile * kGyRow * kBytes;  // one staged gy tile
};
constexpr int kCombineRow = kChunkK + 8;  // floats; 8 mod 32 spreads a quarter-warp's rows

// Byte offset of the two patch buffers (after the gy stages), and the total.
struct WgradLayout {
  int patch, bytes;
};

template <typename T>
__host__ __device__ inline WgradLayout wgrad_layout(const Geometry& g) {
  using W = WgradTraits<T>;
  return {W::kGyStages * W::kGyBytes, W::kGyStages * W::kGyBytes + 2 * g.pr * g.pc * W::kPixelBytes};
}

// Queues the copies of a tile's gy (its 256 pixels by the block's 64 channels, zeros past the
// image and past O) into dst, and commits them as one group; past the last tile, an empty group,
// so that every thread always has the same number of groups in flight.
template <typename T, typename Index>
__device__ __forceinline__ void stage_gy(const typename Element<T>::Stored* __restrict__ gy, const Geometry& g,
                                         int tile, int oc0, unsigned char* dst) {
  using W = WgradTraits<T>;
  constexpr int kPer = 16 / W::kBytes;      // channels a 16-byte copy moves
  constexpr int kParts = kChunkO / kPer;    // copies a pixel
  if (tile < g.tiles) {
    const TileAt at = tile_at(g, tile);
#pragma unroll
    for (int i = static_cast<int>(threadIdx.x); i < kTile * kTile * kParts; i += kThreads) {
      const int px = i / kParts, part = i % kParts;
      const int oy = at.oy0 + (px >> 4), ox = at.ox0 + (px & 15), o = oc0 + part * kPer;
      const bool inside = oy < g.oh && ox < g.ow && o < g.o;
      const typename W::Stored* src =
          inside ? gy + ((static_cast<Index>(at.img) * static_cast<Index>(g.oh) + static_cast<Index>(oy)) *
                             static_cast<Index>(g.ow) +
                         static_cast<Index>(ox)) *
                            static_cast<Index>(g.o) +
                       o
                 : gy;
      cp_async_16(dst + px * W::kGyRow * W::kBytes + part * 16, src, inside ? 16 : 0);
    }
  }
  cp_async_commit();
}

// Tile row r of a 16-bit weight gradient into acc: B gathered from the patch row prow 16 bits at a
// time, A (gy transposed) by ldmatrix from the staged gy tile gyb, one m16n8k16 instruction per
// output-channel tile mt and weight-column tile j.
template <typename T>
__device__ __forceinline__ void wgrad_row_16bit(const unsigned char* gyb, const unsigned char* prow, int r, int oc0,
                                                int kc0, int kg, int kcols, int o, int ld_pixel, int ld_channel,
                                                const int (&pixel_at)[4], const int (&column_at)[kTilesK],
                                                float (&acc)[4][kTilesK][4]) {
  std::uint32_t b[kTilesK][2];
#pragma unroll
  for (int j = 0; j < kTilesK; ++j) {
    const unsigned char* col = prow + column_at[j];
    const std::uint32_t v0 = *reinterpret_cast<const std::uint16_t*>(col + pixel_at[0]);
    const std::uint32_t v1 = *reinterpret_cast<const std::uint16_t*>(col + pixel_at[1]);
    const std::uint32_t v2 = *reinterpret_cast<const std::uint16_t*>(col + pixel_at[2]);
    const std::uint32_t v3 = *reinterpret_cast<const std::uint16_t*>(col + pixel_at[3]);
    b[j][0] = v0 | v1 << 16;
    b[j][1] = v2 | v3 << 16;
  }
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
    if (oc0 + 16 * mt >= o) break;
    std::uint32_t a[4];
    ldmatrix_x4_trans(a, gyb + ((r * kTile + ld_pixel) * WgradTraits<T>::kGyRow + 16 * mt + ld_channel) * 2);
#pragma unroll
    for (int j = 0; j < kTilesK; ++j)
      if (kc0 + (kg + kGroupsK * j) * 8 < kcols) mma_16816<T>(acc[mt][j], a, b[j][0], b[j][1]);
  }
}

// The same for float32 as TF32: per 16 pixels two m16n8k8 instructions, the h-th taking thread t's
// k values t and t + 4 as pixels 2t + 8h and 2t + 8h + 1 (the pixels the 16-bit gather pairs, so
// pixel_at serves both). A comes from the staged gy by plain loads, rounded to TF32 here (the
// asynchronous copies bypass registers); B from the patch, whose values are TF32 already.
__device__ __forceinline__ void wgrad_row_tf32(const unsigned char* gyb, const unsigned char* prow, int r, int oc0,
                                               int kc0, int kg, int kcols, int o, int gid, int t4,
                                               const int (&pixel_at)[4], const int (&column_at)[kTilesK],
                                               float (&acc)[4][kTilesK][4]) {
  constexpr int kRow = WgradTraits<float>::kGyRow;
  const float* gy_row = reinterpret_cast<const float*>(gyb) + r * kTile * kRow;  // pixel 0 of tile row r
  std::uint32_t b[kTilesK][4];
#pragma unroll
  for (int j = 0; j < kTilesK; ++j) {
    const unsigned char* col = prow + column_at[j];
#pragma unroll
    for (int i = 0; i < 4; ++i) b[j][i] = *reinterpret_cast<const std::uint32_t*>(col + pixel_at[i]);
  }
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
    if (oc0 + 16 * mt >= o) break;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float* p0 = gy_row + (2 * t4 + 8 * h) * kRow + 16 * mt + gid;  // pixel 2t + 8h, channel gid
      const float* p1 = p0 + kRow;                                          // pixel 2t + 8h + 1
      const std::uint32_t a[4] = {to_tf32(p0[0]), to_tf32(p0[8]), to_tf32(p1[0]), to_tf32(p1[8])};
#pragma unroll
      for (int j = 0; j < kTilesK; ++j)
        if (kc0 + (kg + kGroupsK * j) * 8 < kcols) mma_1688_tf32(acc[mt][j], a, b[j][2 * h], b[j][2 * h + 1]);
    }
  }
}

template <typename T, typename Index>
__global__ void __launch_bounds__(kThreads, 1)
    conv_wgrad_kernel(const typename Element<T>::Stored* __restrict__ x,
                      const typename Element<T>::Stored* __restrict__ gy, Geometry g, float* __restrict__ partials) {
  using W = WgradTraits<T>;
  using Pixel = typename W::Pixel;
  constexpr int kPixelBytes = W::kPixelBytes;
  extern __shared__ __align__(16) unsigned char smem[];
  const WgradLayout l = wgrad_layout<T>(g);
  Pixel* const patch = reinterpret_cast<Pixel*>(smem + l.patch);
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int gid = lane >> 2, t4 = lane & 3;
  const int kg = warp % kGroupsK, pg = warp / kGroupsK;
  const int patch_pixels = g.pr * g.pc;
  const int oc0 = static_cast<int>(blockIdx.y) * kChunkO, kc0 = static_cast<int>(blockIdx.z) * kChunkK;
  const int kcols = g.positions * g.c;
  const int step = static_cast<int>(gridDim.x);

  // Byte offsets in a patch row of the window origins of this thread's B pixels (2t, 2t+1,
  // 2t+8, 2t+9), and of its column gid of each of its column tiles from a window origin.
  int pixel_at[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) pixel_at[i] = (2 * t4 + (i & 1) + (i >> 1) * 8) * g.sw * kPixelBytes;
  int column_at[kTilesK];
#pragma unroll
  for (int j = 0; j < kTilesK; ++j) {
    const int k = kc0 + (kg + kGroupsK * j) * 8 + gid;
    const int pos = k / g.c, c = k % g.c;
    column_at[j] = k < kcols ? ((pos / g.kw) * g.pc + pos % g.kw) * kPixelBytes + c * W::kBytes : 0;
  }
  // ldmatrix's row addresses: lanes 0-7, 8-15, 16-23 and 24-31 give the pixel rows of the four
  // 8x8 matrices (channels +0 and +8 of pixels 0-7, then of pixels 8-15), which transposed are
  // the A operand's four registers.
  const int ld_pixel = (lane & 7) + ((lane >> 4) << 3), ld_channel = ((lane >> 3) & 1) * 8;

  int tile = static_cast<int>(blockIdx.x);
#pragma unroll
  for (int s = 0; s < W::kGyStages - 1; ++s)
    stage_gy<T, Index>(gy, g, tile + s * step, oc0, smem + s * W::kGyBytes);
  Pixel fetched[kPatchSlots];
  {
    const TileAt at = tile_at(g, tile);
    fetch_patch<T, Index>(x, g, at, fetched);
    store_patch(patch, patch_pixels, fetched);
  }

  // One barrier per tile: after it, this tile's gy and patch are in place for every warp, and
  // every warp is done with the previous tile, whose gy stage and patch buffer are refilled next.
  float acc[4][kTilesK][4] = {};
  for (int i = 0; tile < g.tiles; tile += step, ++i) {
    cp_async_wait_groups<W::kGyStages - 2>();
    __syncthreads();
    const int next = tile + step;
    stage_gy<T, Index>(gy, g, tile + (W::kGyStages - 1) * step, oc0,
                       smem + ((i + W::kGyStages - 1) % W::kGyStages) * W::kGyBytes);
    if (next < g.tiles) {
      const TileAt at = tile_at(g, next);
      fetch_patch<T, Index>(x, g, at, fetched);
    }

    const unsigned char* gyb = smem + (i % W::kGyStages) * W::kGyBytes;
    const auto* pb = reinterpret_cast<const unsigned char*>(patch + (i & 1) * patch_pixels);
    const int oy0 = tile_at(g, tile).oy0;
    for (int r = pg; r < kTile && oy0 + r < g.oh; r += 2) {
      const unsigned char* prow = pb + r * g.sh * g.pc * kPixelBytes;
      if constexpr (W::kTf32) {
        wgrad_row_tf32(gyb, prow, r, oc0, kc0, kg, kcols, g.o, gid, t4, pixel_at, column_at, acc);
      } else {
        wgrad_row_16bit<T>(gyb, prow, r, oc0, kc0, kg, kcols, g.o, ld_pixel, ld_channel, pixel_at, column_at, acc);
      }
    }

    if (next < g.tiles) store_patch(patch + ((i + 1) & 1) * patch_pixels, patch_pixels, fetched);
  }

  // The two pixel groups' sums meet in shared memory (over the gy stages, which no copy is
  // filling any more), then pixel group 0 writes the block's row of partials.
  cp_async_wait_groups<0>();
  __syncthreads();
  auto* combine = reinterpret_cast<float*>(smem);
  if (pg == 1) {
#pragma unroll
    for (int mt = 0; mt < 4; ++mt)
#pragma unroll
      for (int j = 0; j < kTilesK; ++j) {
        const int col = (kg + kGroupsK * j) * 8 + 2 * t4;
        *reinterpret_cast<float2*>(combine + (16 * mt + gid) * kCombineRow + col) =
            make_float2(acc[mt][j][0], acc[mt][j][1]);
        *reinterpret_cast<float2*>(combine + (16 * mt + gid + 8) * kCombineRow + col) =
            make_float2(acc[mt][j][2], acc[mt][j][3]);
      }
  }
  __syncthreads();
  if (pg == 1) return;
  float* out = partials + static_cast<std::int64_t>(blockIdx.x) * g.o * kcols;
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int j = 0; j < kTilesK; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ol = 16 * mt + gid + (e >> 1) * 8, cl = (kg + kGroupsK * j) * 8 + 2 * t4 + (e & 1);
        const int o = oc0 + ol, k = kc0 + cl;
        if (o < g.o && k < kcols)
          out[static_cast<std::int64_t>(o) * kcols + k] = acc[mt][j][e] + combine[ol * kCombineRow + cl];
      }
}

// gw[i] = beta*gw[i] + the sum of partials[b][i] over the blocks b in order. A warp per 32
// elements would leave most of the GPU idle for the few thousand elements of a stem's weights, so
// the eight warps of a block each sum every eighth block's partials and then meet in a fixed order.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    sum_partials_kernel(const float* __restrict__ partials, int parts, int count, float beta, T* __restrict__ gw) {
  __shared__ float part_sum[kWarps][32];
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int i = static_cast<int>(blockIdx.x) * 32 + lane;
  float s = 0.f;
  if (i < count)
    for (int b = warp; b < parts; b += kWarps) s += partials[static_cast<std::int64_t>(b) * count + i];
  part_sum[warp][lane] = s;
  __syncthreads();
  if (warp != 0 || i >= count) return;
  float total = 0.f;
#pragma unroll
  for (int k = 0; k < kWarps; ++k) total += part_sum[k][lane];
  if (beta != 0.f) total += beta * to_float(gw[i]);
  gw[i] = from_float<T>(total);
}

// --- launchers --------------------------------------------------------------------------------

Geometry geometry_of(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  const auto i = [](std::int64_t v) { return static_cast<int>(v); };
  Geometry g{};
  g.n = i(x.size(0));
  g.c = i(x.size(1));
  g.h = i(x.size(2));
  g.w = i(x.size(3));
  g.o = i(w.size(0));
  g.kh = i(w.size(2));
  g.kw = i(w.size(3));
  g.sh = i(p.stride[0]);
  g.sw = i(p.stride[1]);
  g.ph = i(p.padding[0]);
  g.pw = i(p.padding[1]);
  g.oh = (g.h + 2 * g.ph - g.kh) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
  g.pr = (kTile - 1) * g.sh + g.kh;
  g.pc = (kTile - 1) * g.sw + g.kw;
  g.pc_magic = static_cast<unsigned>(((std::uint64_t{1} << 32) + g.pc - 1) / g.pc);
  g.tiles_y = (g.oh + kTile - 1) / kTile;
  g.tiles_x = (g.ow + kTile - 1) / kTile;
  g.tiles = g.n * g.tiles_y * g.tiles_x;
  g.positions = g.kh * g.kw;
  return g;
}

bool supported_gpu(int device) { return compute_capability(device) >= 80; }

// Persistent blocks: as many as fit on the GPU at once, shared among the `others` blocks along
// the grid's other dimensions, never more than there are tiles.
template <typename Kernel>
unsigned persistent_blocks(Kernel kernel, int smem_bytes, int device, int tiles, int others) {
  DPL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  int per_sm = 0;
  DPL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem_bytes));
  DPL_CHECK(per_sm > 0, "conv (few channels): a block of ", kThreads, " threads and ", smem_bytes,
            " bytes of shared memory does not fit on cuda:", device);
  const std::int64_t resident = static_cast<std::int64_t>(per_sm) * sm_count(device);
  const std::int64_t blocks = std::max<std::int64_t>(1, (resident + others - 1) / others);
  return static_cast<unsigned>(std::min<std::int64_t>(blocks, tiles));
}

template <typename T, int NT>
void launch_forward(const Geometry& g, const Tensor& x, const Tensor& w, Tensor& y, CudaDevice& d) {
  using Stored = typename Element<T>::Stored;
  const ForwardLayout l = forward_layout<T>(g, NT);
  const auto* xp = static_cast<const Stored*>(x.raw_data());
  const auto* wp = static_cast<const Stored*>(w.raw_data());
  auto* yp = static_cast<Stored*>(y.raw_data());
  const int chunks = g.o / (NT * 8);
  with_index_type(std::max(x.numel(), y.numel()), [&](auto index) {
    using Index = decltype(index);
    const auto kernel = conv_forward_kernel<T, NT, Index>;
    const dim3 grid(persistent_blocks(kernel, l.bytes, d.device(), g.tiles, chunks), static_cast<unsigned>(chunks));
    kernel<<<grid, kThreads, l.bytes, d.stream()>>>(xp, wp, g, yp);
  });
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_backward_weight(const Geometry& g, const Tensor& x, const Tensor& gy, float beta, Tensor& gw,
                            CudaDevice& d) {
  const WgradLayout l = wgrad_layout<T>(g);
  const int kcols = g.positions * g.c;
  const int o_chunks = (g.o + kChunkO - 1) / kChunkO, k_chunks = (kcols + kChunkK - 1) / kChunkK;
  const int count = g.o * kcols;
  using Stored = typename Element<T>::Stored;
  const auto* xp = static_cast<const Stored*>(x.raw_data());
  const auto* gyp = static_cast<const Stored*>(gy.raw_data());
  with_index_type(std::max(x.numel(), gy.numel()), [&](auto index) {
    using Index = decltype(index);
    const auto kernel = conv_wgrad_kernel<T, Index>;
    const unsigned blocks = persistent_blocks(kernel, l.bytes, d.device(), g.tiles, o_chunks * k_chunks);
    // Every block writes its part of its row of partials; the caching allocator makes this cheap.
    const Tensor partials =
        Tensor::empty({static_cast<std::int64_t>(blocks), count}, TensorOptions(kFloat32, x.device()));
    auto* pp = static_cast<float*>(partials.raw_data());
    const dim3 grid(blocks, static_cast<unsigned>(o_chunks), static_cast<unsigned>(k_chunks));
    kernel<<<grid, kThreads, l.bytes, d.stream()>>>(xp, gyp, g, pp);
    DPL_CUDA_CHECK(cudaGetLastError());
    sum_partials_kernel<T><<<static_cast<unsigned>((count + 31) / 32), kThreads, 0, d.stream()>>>(
        pp, static_cast<int>(blocks), count, beta, static_cast<T*>(gw.raw_data()));
  });
  DPL_CUDA_CHECK(cudaGetLastError());
}

// What conv_few_channels_fits takes, and the geometry of p, for messages.
std::string taken() {
  std::ostringstream s;
  s << "an image and weights on one GPU of compute capability 8.0 or newer, channels-last, both bfloat16, both "
       "float16 or both float32, with 1 to 4 input channels, a multiple of 8 output channels, one group, no "
       "dilation, at most "
    << kMaxPositions << " window positions and (" << kTile - 1 << " * stride + kernel extent) squared at most "
    << kMaxPatch;
  return s.str();
}

std::string geometry_str(const Conv2dParams& p) {
  std::ostringstream s;
  s << "stride (" << p.stride[0] << ", " << p.stride[1] << "), padding (" << p.padding[0] << ", " << p.padding[1]
    << "), dilation (" << p.dilation[0] << ", " << p.dilation[1] << "), groups " << p.groups;
  return s.str();
}

// Whether t is 4-D of extents (d0, d1, d2, d3).
bool matches(const Tensor& t, std::int64_t d0, std::int64_t d1, std::int64_t d2, std::int64_t d3) {
  return t.dim() == 4 && t.size(0) == d0 && t.size(1) == d1 && t.size(2) == d2 && t.size(3) == d3;
}

std::string operand_str(const Tensor& t) {
  std::ostringstream s;
  s << shape_str(t.shape()) << " strides " << shape_str(t.strides()) << " " << t.dtype() << " on " << t.device();
  return s.str();
}

// What both passes take, apart from the dtype.
bool shape_fits(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  if (!x.defined() || !w.defined() || x.dim() != 4 || w.dim() != 4) return false;
  if (!x.device().is_cuda() || w.device() != x.device() || w.dtype() != x.dtype()) return false;
  if (!x.is_channels_last() || !w.is_channels_last()) return false;
  if (p.groups != 1 || p.dilation[0] != 1 || p.dilation[1] != 1) return false;
  if (p.stride[0] < 1 || p.stride[1] < 1 || p.padding[0] < 0 || p.padding[1] < 0) return false;
  const std::int64_t c = x.size(1), o = w.size(0), kh = w.size(2), kw = w.size(3);
  if (c < 1 || c > 4 || w.size(1) != c || o < 8 || o % 8 != 0 || kh < 1 || kw < 1) return false;
  if (kh * kw > kMaxPositions) return false;
  const std::int64_t pr = (kTile - 1) * p.stride[0] + kh, pc = (kTile - 1) * p.stride[1] + kw;
  if (pr * pc > kMaxPatch) return false;
  // Extents and tile numbers are ints in the kernels (offsets into the tensors are not; a block
  // looks a few grid strides past its tile), and the output channels' blocks are the grid's y.
  const std::int64_t n = x.size(0), h = x.size(2) + 2 * p.padding[0], wd = x.size(3) + 2 * p.padding[1];
  if (n < 1 || h < kh || wd < kw || h > (1 << 20) || wd > (1 << 20) || o > (1 << 16)) return false;
  const std::int64_t tiles_y = ((h - kh) / p.stride[0] + kTile) / kTile;
  const std::int64_t tiles_x = ((wd - kw) / p.stride[1] + kTile) / kTile;
  if (n * tiles_y * tiles_x >= (std::int64_t{1} << 30)) return false;
  return supported_gpu(x.device().index);
}

}  // namespace

bool conv_few_channels_fits(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  if (x.dtype() == kBFloat16 || x.dtype() == kFloat16) return shape_fits(x, w, p);
  if (x.dtype() != kFloat32 || !shape_fits(x, w, p)) return false;
  // Float32's weights, patches and staged gradients take twice the shared memory: the forward
  // pass's widest block and the weight gradient's block must fit.
  const Geometry g = geometry_of(x, w, p);
  const int most = shared_memory_per_block(x.device().index);
  return forward_layout<float>(g, 8).bytes <= most && wgrad_layout<float>(g).bytes <= most;
}

namespace {

// The geometry of a call, after checking what the kernels take: x and the weights (w, named
// w_name) as conv_few_channels_fits says, and the image-shaped operand (the forward's output or
// the weight gradient's gy, named image_name) channels-last of the output's extents, x's dtype and
// device, its data 16-byte aligned.
Geometry checked_geometry(const char* op, const Tensor& x, const Tensor& w, const char* w_name, const Tensor& image,
                          const char* image_name, const Conv2dParams& p) {
  DPL_CHECK(conv_few_channels_fits(x, w, p), op, ": expected ", taken(), ", got x ", operand_str(x), ", ", w_name,
            " ", operand_str(w), ", ", geometry_str(p));
  const Geometry g = geometry_of(x, w, p);
  DPL_CHECK(matches(image, g.n, g.o, g.oh, g.ow) && image.dtype() == x.dtype() && image.device() == x.device() &&
                image.is_channels_last() && aligned16(image.raw_data()),
            op, ": expected ", image_name, " channels-last (", g.n, ", ", g.o, ", ", g.oh, ", ", g.ow, ") ", x.dtype(),
            " on ", x.device(), " with 16-byte aligned data, got ", operand_str(image));
  return g;
}

}  // namespace

void conv_few_channels_forward(const Tensor& x, const Tensor& w, const Conv2dParams& p, Tensor& y) {
  const Geometry g = checked_geometry("conv (few channels)", x, w, "w", y, "y", p);
  CudaDevice& d = cuda_device_of(x);
  DeviceGuard guard(d.device());
  with_float_type(x.dtype(), "conv (few channels)", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (g.o % 64 == 0) launch_forward<T, 8>(g, x, w, y, d);
    else if (g.o % 32 == 0) launch_forward<T, 4>(g, x, w, y, d);
    else if (g.o % 16 == 0) launch_forward<T, 2>(g, x, w, y, d);
    else launch_forward<T, 1>(g, x, w, y, d);
  });
}

void conv_few_channels_backward_weight(const Tensor& x, const Tensor& gy, const Conv2dParams& p, float beta,
                                       Tensor& gw) {
  const Geometry g = checked_geometry("conv weight gradient (few channels)", x, gw, "gw", gy, "gy", p);
  CudaDevice& d = cuda_device_of(x);
  DeviceGuard guard(d.device());
  with_float_type(x.dtype(), "conv weight gradient (few channels)", [&](auto tag) {
    launch_backward_weight<typename decltype(tag)::type>(g, x, gy, beta, gw, d);
  });
}

}  // namespace dpl::backend::cuda_detail
