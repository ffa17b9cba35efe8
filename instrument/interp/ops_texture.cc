// Texture and surface instructions (docs/instrument.md §6 "Textures and
// surfaces"): tex, tld4, txq (sampling through a texture object), suld,
// sust, suq (raw loads and stores through a surface object). The handle
// operand names an object of LaunchOptions::textures; its texels are
// device memory read (and, for surfaces, written) through Resolve, so every
// access is bounds-checked like ld/st.
//
// Sampling follows the CUDA Programming Guide's texture-fetching appendix:
// normalized coordinates are scaled by the extent; nearest-point picks
// floor(x); linear filtering blends the two (four, eight) nearest texels
// with weights held, as the hardware does, in 9-bit fixed point with 8
// fractional bits; the address mode maps an out-of-range texel index
// (wrap and mirror only with normalized coordinates, else clamp), border
// reads the border colour. Integer coordinates (.s32) fetch a texel with
// no filtering; a linear-memory resource reads 0 out of range
// (tex1Dfetch). Channels a format lacks read as (0, 0, 0, 1).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/hex.h"
#include "interp/exec.h"

namespace phos::interp {

namespace {

using ptx::Space;
using ptx::Type;
using Address = TextureDesc::Address;

bool Layered(uint8_t geom) { return geom == kGeomA1d || geom == kGeomA2d || geom == kGeomACube; }
bool Cube(uint8_t geom) { return geom == kGeomCube || geom == kGeomACube; }

// A cube-map fetch's face and its coordinates in [0, 1] from the direction
// (x, y, z): the face of the major axis (+x, -x, +y, -y, +z, -z = 0..5) and
// (s/|m| + 1)/2, (t/|m| + 1)/2 with (m, s, t) as the CUDA programming
// guide's cube-map table gives them (OpenGL's and Direct3D's convention).
// Ties go to x, then y. A zero direction reads face 0's centre.
void CubeFace(const float* dir, uint32_t* face, float* u, float* v) {
  const float x = dir[0], y = dir[1], z = dir[2];
  const float ax = std::fabs(x), ay = std::fabs(y), az = std::fabs(z);
  float m = 0, s = 0, t = 0;
  if (ax >= ay && ax >= az) {
    *face = x >= 0 ? 0 : 1;
    m = ax;
    s = x >= 0 ? -z : z;
    t = -y;
  } else if (ay >= az) {
    *face = y >= 0 ? 2 : 3;
    m = ay;
    s = x;
    t = y >= 0 ? z : -z;
  } else {
    *face = z >= 0 ? 4 : 5;
    m = az;
    s = z >= 0 ? x : -x;
    t = -y;
  }
  if (m == 0) {
    *u = *v = 0.5f;
    return;
  }
  *u = (s / m + 1.0f) * 0.5f;
  *v = (t / m + 1.0f) * 0.5f;
}
int GeomDims(uint8_t geom) {
  switch (geom) {
    case kGeom1d: case kGeomA1d: return 1;
    case kGeom2d: case kGeomA2d: return 2;
    default: return 3;
  }
}

const TextureDesc* FindObject(Exec& x, uint64_t handle, bool surface, const char* what) {
  const TextureTable* table = x.b->opts->textures;
  const TextureDesc* t = table != nullptr ? table->Find(handle) : nullptr;
  if (t == nullptr || t->surface != surface) {
    x.error = std::string(what) + " through handle " + Hex(handle) + ", which is not a live " +
              (surface ? "surface" : "texture") + " object";
    return nullptr;
  }
  return t;
}

uint32_t Extent(const TextureDesc& t, int d) { return d == 0 ? t.width : d == 1 ? t.height : t.depth; }

// The address of texel (i, j, k) of `layer` (indices in range).
uint64_t TexelAddress(const TextureDesc& t, int64_t i, int64_t j, int64_t k, uint32_t layer) {
  const uint64_t slice = t.layers != 0 ? layer : static_cast<uint64_t>(k);
  return t.base + slice * t.slice_pitch + static_cast<uint64_t>(j) * t.pitch +
         static_cast<uint64_t>(i) * t.texel_bytes();
}

// Maps a texel index through the address mode; false: outside (border).
bool AddressIndex(const TextureDesc& t, int d, int64_t* i) {
  const int64_t n = Extent(t, d);
  if (*i >= 0 && *i < n) return true;
  Address mode = t.address[d];
  if (!t.normalized_coords && (mode == Address::kWrap || mode == Address::kMirror)) mode = Address::kClamp;
  switch (mode) {
    case Address::kWrap:
      *i = ((*i % n) + n) % n;
      return true;
    case Address::kMirror: {
      const int64_t m = ((*i % (2 * n)) + 2 * n) % (2 * n);
      *i = m < n ? m : 2 * n - 1 - m;
      return true;
    }
    case Address::kBorder:
      return false;
    case Address::kClamp:
      break;
  }
  *i = std::clamp<int64_t>(*i, 0, n - 1);
  return true;
}

float SrgbToLinear(float c) { return c <= 0.04045f ? c / 12.92f : std::pow((c + 0.055f) / 1.055f, 2.4f); }

// One texel's channels: as floats (float texels, or normalized reads) or
// as integers (element reads of integer texels). Missing channels (0,0,0,1).
struct Texel {
  float f[4] = {0, 0, 0, 1};
  int64_t i[4] = {0, 0, 0, 1};
};

bool ReadTexel(Exec& x, const TextureDesc& t, uint64_t addr, Texel* out) {
  const uint8_t* p = Resolve(x, Space::kGlobal, addr, t.texel_bytes(), false);
  if (p == nullptr) return false;
  for (int c = 0; c < t.channels; ++c) {
    const uint8_t* q = p + c * t.channel_bytes;
    uint32_t raw = 0;
    std::memcpy(&raw, q, t.channel_bytes);
    int64_t iv = 0;
    float fv = 0;
    switch (t.kind) {
      case TextureDesc::Kind::kFloat:
        fv = t.channel_bytes == 2 ? HalfToFloat(static_cast<uint16_t>(raw)) : AsF32(raw);
        iv = static_cast<int64_t>(fv);
        break;
      case TextureDesc::Kind::kUnsigned:
        iv = raw;
        fv = t.read_normalized ? static_cast<float>(raw) / (t.channel_bytes == 1 ? 255.0f : 65535.0f)
                               : static_cast<float>(raw);
        break;
      case TextureDesc::Kind::kSigned: {
        iv = SExt(raw, t.channel_bytes * 8);
        fv = t.read_normalized
                 ? std::max(static_cast<float>(iv) / (t.channel_bytes == 1 ? 127.0f : 32767.0f), -1.0f)
                 : static_cast<float>(iv);
        break;
      }
    }
    if (t.srgb && c < 3) fv = SrgbToLinear(fv);
    out->f[c] = fv;
    out->i[c] = iv;
  }
  if (t.channels < 4) {
    // Formats with fewer channels: the rest (0, 0, 0, 1).
    for (int c = t.channels; c < 4; ++c) {
      out->f[c] = c == 3 ? 1.0f : 0.0f;
      out->i[c] = c == 3 ? 1 : 0;
    }
  }
  return true;
}

Texel BorderTexel(const TextureDesc& t) {
  Texel b;
  for (int c = 0; c < 4; ++c) {
    b.f[c] = t.border[c];
    b.i[c] = static_cast<int64_t>(t.border[c]);
  }
  return b;
}

// The texel at integer indices idx[0..dims) of `layer`, through the
// address modes. False: x.error is set (illegal address).
bool FetchAt(Exec& x, const TextureDesc& t, int dims, const int64_t* idx, uint32_t layer, Texel* out) {
  int64_t ijk[3] = {0, 0, 0};
  for (int d = 0; d < dims; ++d) {
    ijk[d] = idx[d];
    if (t.linear_memory) {
      if (ijk[d] < 0 || ijk[d] >= Extent(t, d)) {
        *out = Texel{};
        for (int c = 0; c < 4; ++c) out->f[c] = 0, out->i[c] = 0;  // tex1Dfetch out of range: 0
        return true;
      }
      continue;
    }
    if (!AddressIndex(t, d, &ijk[d])) {
      *out = BorderTexel(t);
      return true;
    }
  }
  return ReadTexel(x, t, TexelAddress(t, ijk[0], ijk[1], ijk[2], layer), out);
}

// The filter weight's fraction as the hardware holds it: 8 fractional bits.
float FixedFraction(float f) { return std::round(f * 256.0f) / 256.0f; }

// Samples at float coordinates c[0..dims) (already scaled to texels).
bool Sample(Exec& x, const TextureDesc& t, int dims, const float* c, uint32_t layer, Texel* out) {
  if (!t.linear_filter) {
    int64_t idx[3];
    for (int d = 0; d < dims; ++d) idx[d] = static_cast<int64_t>(std::floor(c[d]));
    return FetchAt(x, t, dims, idx, layer, out);
  }
  int64_t base[3] = {0, 0, 0};
  float a[3] = {0, 0, 0};
  for (int d = 0; d < dims; ++d) {
    const float cb = c[d] - 0.5f;
    const float fl = std::floor(cb);
    base[d] = static_cast<int64_t>(fl);
    a[d] = FixedFraction(cb - fl);
  }
  float acc[4] = {0, 0, 0, 0};
  const int corners = 1 << dims;
  for (int m = 0; m < corners; ++m) {
    int64_t idx[3];
    float w = 1.0f;
    for (int d = 0; d < dims; ++d) {
      const int bit = (m >> d) & 1;
      idx[d] = base[d] + bit;
      w *= bit ? a[d] : 1.0f - a[d];
    }
    if (w == 0.0f) continue;
    Texel tx;
    if (!FetchAt(x, t, dims, idx, layer, &tx)) return false;
    for (int ch = 0; ch < 4; ++ch) acc[ch] += w * tx.f[ch];
  }
  for (int ch = 0; ch < 4; ++ch) {
    out->f[ch] = acc[ch];
    out->i[ch] = static_cast<int64_t>(acc[ch]);
  }
  return true;
}

// Writes `n` channels of `tx` into the destination operands 0..n-1 as
// op.type (f32: floats; s32/u32: integers, or float texels converted).
void WriteResult(Exec& x, const Op& op, int n, const Texel& tx, bool float_texels) {
  for (int c = 0; c < n; ++c) {
    uint64_t v = 0;
    if (op.type == Type::kF32) {
      v = F32Bits(tx.f[c]);
    } else if (float_texels) {
      v = static_cast<uint32_t>(static_cast<int32_t>(tx.f[c]));
    } else {
      v = static_cast<uint32_t>(tx.i[c]);
    }
    Set(x, op, c, v);
  }
}

// Reads the coordinates of a tex/tld4 (after the handle): the layer index
// of an array geometry (a .u32 whatever the coordinate type) and up to 3
// coordinates; `integer`: .s32 coordinates.
void ReadCoords(Exec& x, const Op& op, int first, uint8_t geom, bool integer, uint32_t* layer, float* fc,
                int64_t* ic) {
  int k = first;
  if (Layered(geom)) *layer = static_cast<uint32_t>(Src(x, op, k++));
  for (int d = 0; d < GeomDims(geom); ++d, ++k) {
    const uint64_t v = Src(x, op, k);
    if (integer) ic[d] = SExt(v, 32);
    else fc[d] = AsF32(v);
  }
}

uint32_t ClampLayer(const TextureDesc& t, uint32_t layer) { return t.layers == 0 ? 0 : std::min(layer, t.layers - 1); }

}  // namespace

Flow ExecTex(Exec& x, const Op& op) {
  const int n = op.shape[0];
  const TextureDesc* t = FindObject(x, Src(x, op, n), false, "tex");
  if (t == nullptr) return Flow::kError;
  const uint8_t geom = op.sub;
  const bool integer = op.type2 == Type::kS32 || op.type2 == Type::kU32;
  uint32_t layer = 0;
  float fc[3] = {0, 0, 0};
  int64_t ic[3] = {0, 0, 0};
  ReadCoords(x, op, n + 1, geom, integer, &layer, fc, ic);
  if (Cube(geom)) {
    if (!t->cubemap) return Fail(x, "tex.cube of a texture that is not a cube map");
    // The face's point sample (linear filtering of cube maps is refused
    // when the object is made): face coordinates in [0, 1], clamped at the
    // face's edges whatever the object's address mode.
    uint32_t face = 0;
    float uv[3] = {0, 0, 0};
    CubeFace(fc, &face, &uv[0], &uv[1]);
    const uint32_t cubes = t->layers / 6;
    const uint32_t cube = Layered(geom) ? std::min(layer, cubes == 0 ? 0 : cubes - 1) : 0;
    TextureDesc clamped = *t;
    clamped.address[0] = clamped.address[1] = TextureDesc::Address::kClamp;
    uv[0] *= static_cast<float>(t->width);
    uv[1] *= static_cast<float>(t->height);
    Texel tx;
    if (!Sample(x, clamped, 2, uv, cube * 6 + face, &tx)) return Flow::kError;
    WriteResult(x, op, n, tx, t->kind == TextureDesc::Kind::kFloat || t->read_normalized);
    return Flow::kNext;
  }
  layer = ClampLayer(*t, layer);
  const int dims = GeomDims(geom);
  Texel tx;
  bool ok = false;
  if (t->mip_count > 1) {
    // A mip chain: the level of detail is the .level operand (0 without
    // one), clamped to the object's levels; the nearest level, or the two
    // around it blended (8-bit weight, as the filter weights).
    if (op.target & kTexGrad) {
      return Fail(x, "tex.grad of a mipmapped texture (the level of detail from gradients is not modelled)");
    }
    float lod = 0.0f;
    if (op.target & kTexLevel) lod = AsF32(Src(x, op, n + op.shape[1]));
    if (!(lod >= t->min_level)) lod = t->min_level;  // NaN too
    if (lod > t->max_level) lod = t->max_level;
    auto level_desc = [&](uint32_t k) {
      TextureDesc lt = *t;
      const TextureDesc::Mip& m = t->mips[k];
      lt.base = m.base, lt.pitch = m.pitch, lt.slice_pitch = m.slice_pitch;
      lt.width = m.width, lt.height = m.height, lt.depth = m.depth;
      lt.mip_count = 0;
      return lt;
    };
    auto at_level = [&](uint32_t k, Texel* out) {
      const TextureDesc lt = level_desc(k);
      if (integer) {
        int64_t li[3] = {ic[0] >> k, ic[1] >> k, ic[2] >> k};
        return FetchAt(x, lt, dims, li, layer, out);
      }
      float c[3] = {fc[0], fc[1], fc[2]};
      for (int d = 0; d < dims; ++d) c[d] *= static_cast<float>(Extent(lt, d));  // normalized (checked)
      return Sample(x, lt, dims, c, layer, out);
    };
    if (!t->mip_linear || integer) {
      ok = at_level(static_cast<uint32_t>(std::floor(lod + 0.5f)), &tx);
    } else {
      const uint32_t k0 = static_cast<uint32_t>(std::floor(lod));
      const uint32_t k1 = std::min<uint32_t>(k0 + 1, t->max_level);
      const float w = FixedFraction(lod - static_cast<float>(k0));
      Texel a, b;
      ok = at_level(k0, &a) && at_level(k1, &b);
      for (int c = 0; ok && c < 4; ++c) {
        tx.f[c] = a.f[c] * (1.0f - w) + b.f[c] * w;
        tx.i[c] = static_cast<int64_t>(tx.f[c]);
      }
    }
  } else if (integer) {
    ok = FetchAt(x, *t, dims, ic, layer, &tx);
  } else {
    for (int d = 0; d < dims; ++d) {
      if (t->normalized_coords) fc[d] *= static_cast<float>(Extent(*t, d));
    }
    ok = Sample(x, *t, dims, fc, layer, &tx);
  }
  if (!ok) return Flow::kError;
  WriteResult(x, op, n, tx, t->kind == TextureDesc::Kind::kFloat || t->read_normalized);
  return Flow::kNext;
}

Flow ExecTld4(Exec& x, const Op& op) {
  const int n = op.shape[0];
  const TextureDesc* t = FindObject(x, Src(x, op, n), false, "tld4");
  if (t == nullptr) return Flow::kError;
  const uint8_t geom = op.sub;
  uint32_t layer = 0;
  float fc[3] = {0, 0, 0};
  int64_t ic[3] = {0, 0, 0};
  ReadCoords(x, op, n + 1, geom, false, &layer, fc, ic);
  layer = ClampLayer(*t, layer);
  int64_t base[2];
  for (int d = 0; d < 2; ++d) {
    float c = fc[d];
    if (t->normalized_coords) c *= static_cast<float>(Extent(*t, d));
    base[d] = static_cast<int64_t>(std::floor(c - 0.5f));
  }
  // The bilinear footprint in the order the PTX ISA gives: (u0,v1),
  // (u1,v1), (u1,v0), (u0,v0); component `op.target` of each.
  static constexpr int kCorner[4][2] = {{0, 1}, {1, 1}, {1, 0}, {0, 0}};
  Texel out;
  for (int q = 0; q < 4; ++q) {
    const int64_t idx[2] = {base[0] + kCorner[q][0], base[1] + kCorner[q][1]};
    Texel tx;
    if (!FetchAt(x, *t, 2, idx, layer, &tx)) return Flow::kError;
    out.f[q] = tx.f[op.target];
    out.i[q] = tx.i[op.target];
  }
  WriteResult(x, op, std::min(n, 4), out, t->kind == TextureDesc::Kind::kFloat || t->read_normalized);
  return Flow::kNext;
}

Flow ExecTextureQuery(Exec& x, const Op& op) {
  const bool surface = (op.target & kQuerySurface) != 0;
  const TextureDesc* t = FindObject(x, Src(x, op, 1), surface, surface ? "suq" : "txq");
  if (t == nullptr) return Flow::kError;
  uint64_t v = 0;
  switch (op.sub) {
    case kQueryWidth: v = t->width; break;
    case kQueryHeight: v = t->height; break;
    case kQueryDepth: v = t->depth; break;
    case kQueryArraySize: v = t->layers; break;
    case kQueryMipLevels: v = t->mip_count > 1 ? t->mip_count : 1; break;
    case kQueryNormalized: v = t->normalized_coords ? 1 : 0; break;
    case kQueryFilter: v = t->linear_filter ? 1 : 0; break;
    case kQueryAddr0: case kQueryAddr1: case kQueryAddr2:
      v = static_cast<uint64_t>(t->address[op.sub - kQueryAddr0]);
      break;
    default:
      return Fail(x, "unsupported texture query");
  }
  Set(x, op, 0, v);
  return Flow::kNext;
}

// suld.b / sust.b: the byte x coordinate, rows and slices in texels.
namespace {

// Resolves the address of a surface access of `bytes` bytes; nullptr with
// *skip set for .zero outside, or with x.error set (.trap, illegal).
uint8_t* SurfaceAddress(Exec& x, const Op& op, const TextureDesc& t, int first, size_t bytes, bool write,
                        bool* skip) {
  *skip = false;
  const uint8_t geom = op.sub;
  int k = first;
  uint32_t layer = 0;
  if (Layered(geom)) layer = static_cast<uint32_t>(Src(x, op, k++));
  int64_t c[3] = {0, 0, 0};
  const int dims = GeomDims(geom);
  for (int d = 0; d < dims; ++d) c[d] = SExt(Src(x, op, k++), 32);
  const int64_t row_bytes = int64_t{t.width} * t.texel_bytes();
  const int64_t limit[3] = {row_bytes - static_cast<int64_t>(bytes) + 1, t.height, t.depth};
  bool outside = t.layers != 0 && layer >= t.layers;
  for (int d = 0; d < dims; ++d) outside = outside || c[d] < 0 || c[d] >= limit[d];
  if (outside) {
    switch (op.target) {
      case kSurfaceZero:
        *skip = true;
        return nullptr;
      case kSurfaceClamp:
        for (int d = 0; d < dims; ++d) c[d] = std::clamp<int64_t>(c[d], 0, std::max<int64_t>(limit[d] - 1, 0));
        if (t.layers != 0) layer = std::min(layer, t.layers - 1);
        break;
      default:
        x.error = std::string(write ? "sust" : "suld") + ": surface access outside the surface (.trap)";
        return nullptr;
    }
  }
  const uint64_t slice = t.layers != 0 ? layer : static_cast<uint64_t>(c[2]);
  const uint64_t addr = t.base + slice * t.slice_pitch + static_cast<uint64_t>(c[1]) * t.pitch + static_cast<uint64_t>(c[0]);
  return Resolve(x, Space::kGlobal, addr, bytes, write);
}

}  // namespace

Flow ExecSuld(Exec& x, const Op& op) {
  const int n = op.shape[0];
  const TextureDesc* t = FindObject(x, Src(x, op, n), true, "suld");
  if (t == nullptr) return Flow::kError;
  const size_t elem = static_cast<size_t>(TypeBytes(op.type));
  bool skip = false;
  const uint8_t* p = SurfaceAddress(x, op, *t, n + 1, elem * static_cast<size_t>(n), false, &skip);
  if (p == nullptr && !skip) return Flow::kError;
  for (int i = 0; i < n; ++i) {
    uint64_t v = 0;
    if (p != nullptr) std::memcpy(&v, p + static_cast<size_t>(i) * elem, elem);
    Set(x, op, i, v);
  }
  return Flow::kNext;
}

Flow ExecSust(Exec& x, const Op& op) {
  const int a = op.shape[0];  // handle + coordinates
  const int n = op.shape[1];  // values
  const TextureDesc* t = FindObject(x, Src(x, op, 0), true, "sust");
  if (t == nullptr) return Flow::kError;
  const size_t elem = static_cast<size_t>(TypeBytes(op.type));
  bool skip = false;
  uint8_t* p = SurfaceAddress(x, op, *t, 1, elem * static_cast<size_t>(n), true, &skip);
  if (p == nullptr) return skip ? Flow::kNext : Flow::kError;
  for (int i = 0; i < n; ++i) {
    const uint64_t v = Src(x, op, a + i);
    std::memcpy(p + static_cast<size_t>(i) * elem, &v, elem);
  }
  return Flow::kNext;
}

}  // namespace phos::interp
