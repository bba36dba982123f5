#include "tilus/ir/layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "tilus/ir/error.h"

namespace tilus {

namespace {

// Products of extents are bounded so that thread, slot and offset arithmetic never
// overflows int64 (a malformed layout throws instead).
constexpr int64_t kMaxProduct = int64_t(1) << 62;

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r) || r > kMaxProduct)
    throw InternalError(fmt::format("layout {} overflows ({} * {})", what, a, b));
  return r;
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p = checked_mul(p, x, "extent product");
  return p;
}

std::string list_str(const std::vector<int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); }

// Spatial and local lists; replicated axes (negative entries) print as "r<extent>".
std::string entries_str(const std::vector<int>& v) {
  std::vector<std::string> parts;
  parts.reserve(v.size());
  for (int e : v) parts.push_back(e < 0 ? fmt::format("r{}", -int64_t(e)) : fmt::format("{}", e));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

// A working form of a register layout used by the algebra: the same lists as the class,
// with each mode's dim explicit, so that intermediate results may hold unit modes (whose
// dim the raw constructor could not infer unambiguously). Modes are ordered by dim, each
// dim's modes major to minor.
struct Repr {
  std::vector<int64_t> shape;
  std::vector<int64_t> ext;
  std::vector<int> dim;
  std::vector<int> spatial;  // mode index, or -extent for a replicated axis
  std::vector<int> local;

  int add_mode(int64_t e, int d) {
    ext.push_back(e);
    dim.push_back(d);
    return int(ext.size()) - 1;
  }
};

Repr to_repr(const RegisterLayout& l) {
  Repr r;
  r.shape = l.shape();
  r.ext = l.mode_shape();
  for (int m = 0; m < int(r.ext.size()); ++m) r.dim.push_back(l.mode_dim(m));
  r.spatial = l.spatial_modes();
  r.local = l.local_modes();
  return r;
}

// Replicated extents must fit the int encoding of the spatial list.
int encode_replicated(int64_t extent) {
  if (extent < 1 || extent > int64_t(std::numeric_limits<int>::max()))
    throw InternalError(fmt::format("replicated axis extent {} is out of range", extent));
  return -int(extent);
}

// The canonical form: unit modes and unit replicated axes dropped, adjacent replicated
// axes merged, and runs of modes that are consecutive within one dim and consecutive (in
// the same order) in one list merged into a single mode. Two layouts with the same
// mapping have the same canonical form.
Repr canonicalize(const Repr& r) {
  int n = int(r.ext.size());
  // 1. Drop unit modes and unit replicated axes; merge replicated axes that become adjacent.
  std::vector<int> keep(n, -1);
  Repr k;
  k.shape = r.shape;
  for (int m = 0; m < n; ++m)
    if (r.ext[m] != 1) keep[m] = k.add_mode(r.ext[m], r.dim[m]);
  for (int e : r.spatial) {
    if (e >= 0) {
      if (keep[e] >= 0) k.spatial.push_back(keep[e]);
    } else if (e != -1) {
      if (!k.spatial.empty() && k.spatial.back() < 0)
        k.spatial.back() = encode_replicated(checked_mul(-int64_t(k.spatial.back()), -int64_t(e), "replication"));
      else
        k.spatial.push_back(e);
    }
  }
  for (int e : r.local)
    if (keep[e] >= 0) k.local.push_back(keep[e]);

  // 2. Merge runs. A run is a maximal sequence of list entries m, m+1, m+2, ... of one
  // dim; its modes form a contiguous index range, so one pass finds every merge.
  int kn = int(k.ext.size());
  std::vector<int> head(kn);
  std::iota(head.begin(), head.end(), 0);
  auto mark_runs = [&](const std::vector<int>& list) {
    for (size_t i = 1; i < list.size(); ++i) {
      int p = list[i - 1], q = list[i];
      if (p >= 0 && q == p + 1 && k.dim[p] == k.dim[q]) head[q] = head[p];
    }
  };
  mark_runs(k.spatial);
  mark_runs(k.local);
  Repr c;
  c.shape = k.shape;
  std::vector<int> merged(kn, -1);
  for (int m = 0; m < kn; ++m) {
    if (head[m] == m)
      merged[m] = c.add_mode(k.ext[m], k.dim[m]);
    else {
      merged[m] = merged[head[m]];
      c.ext[merged[m]] = checked_mul(c.ext[merged[m]], k.ext[m], "mode extent");
    }
  }
  auto rebuild = [&](const std::vector<int>& list, std::vector<int>& out) {
    for (int e : list) {
      if (e < 0)
        out.push_back(e);
      else if (head[e] == e)
        out.push_back(merged[e]);
    }
  };
  rebuild(k.spatial, c.spatial);
  rebuild(k.local, c.local);
  return c;
}

RegisterLayout finish(const Repr& r) {
  // Canonical forms hold no unit modes, so the raw constructor infers every mode's dim
  // exactly as recorded in r.dim.
  Repr c = canonicalize(r);
  std::vector<int64_t> ext = c.ext;
  return RegisterLayout(c.shape, std::move(ext), c.spatial, c.local);
}

void require_defined(const RegisterLayout& l, const char* op) {
  if (!l.defined()) throw InternalError(fmt::format("{} of an undefined register layout", op));
}

// Place values of a mixed-radix list (the last entry least significant).
std::vector<int64_t> place_values(const std::vector<int>& list, const std::vector<int64_t>& ext) {
  std::vector<int64_t> place(list.size());
  int64_t p = 1;
  for (int i = int(list.size()) - 1; i >= 0; --i) {
    place[i] = p;
    int e = list[i];
    p *= e < 0 ? -int64_t(e) : ext[e];
  }
  return place;
}

}  // namespace

// --- RegisterLayout ----------------------------------------------------------------------

RegisterLayout::RegisterLayout(std::vector<int64_t> shape, std::vector<int64_t> mode_shape, std::vector<int> spatial,
                               std::vector<int> local)
    : shape_(std::move(shape)), mode_shape_(std::move(mode_shape)), spatial_(std::move(spatial)),
      local_(std::move(local)) {
  auto fail = [&](const std::string& problem) {
    throw InternalError(fmt::format("malformed register layout (shape={}, modes={}, spatial={}, local={}): {}",
                                    list_str(shape_), list_str(mode_shape_), entries_str(spatial_),
                                    entries_str(local_), problem));
  };
  for (int64_t e : shape_)
    if (e < 1) fail(fmt::format("tile extent {} is not positive", e));
  for (int64_t e : mode_shape_)
    if (e < 1) fail(fmt::format("mode extent {} is not positive", e));
  try {
    product(shape_);
  } catch (const InternalError&) {
    fail("the tile has too many elements");
  }

  // Each dim takes modes until their product reaches its extent; a unit mode at a dim
  // boundary therefore belongs to the later dim, and trailing unit modes to the last dim.
  int nm = int(mode_shape_.size());
  mode_dim_.assign(nm, -1);
  int m = 0;
  for (int d = 0; d < rank(); ++d) {
    int64_t p = 1;
    while (p < shape_[d]) {
      if (m == nm) fail(fmt::format("the modes run out before dim {} (extent {}) is complete", d, shape_[d]));
      if (__builtin_mul_overflow(p, mode_shape_[m], &p) || p > shape_[d] || shape_[d] % p != 0)
        fail(fmt::format("the modes of dim {} do not multiply to its extent {}", d, shape_[d]));
      mode_dim_[m++] = d;
    }
  }
  for (; m < nm; ++m) {
    if (mode_shape_[m] != 1) fail(fmt::format("mode {} (extent {}) belongs to no dim", m, mode_shape_[m]));
    if (rank() == 0) fail(fmt::format("mode {} belongs to no dim of a rank-0 tile", m));
    mode_dim_[m] = rank() - 1;
  }

  std::vector<int> seen(nm, 0);
  int64_t threads = 1, slots = 1;
  for (int e : spatial_) {
    if (e >= nm) fail(fmt::format("spatial entry {} is not a mode", e));
    int64_t extent = e < 0 ? -int64_t(e) : mode_shape_[e];
    if (e >= 0) ++seen[e];
    if (threads > kMaxProduct / extent) fail("too many threads");
    threads *= extent;
  }
  for (int e : local_) {
    if (e < 0 || e >= nm) fail(fmt::format("local entry {} is not a mode", e));
    ++seen[e];
    slots *= mode_shape_[e];  // bounded by the tile size
  }
  for (int i = 0; i < nm; ++i)
    if (seen[i] != 1) fail(fmt::format("mode {} appears {} times in spatial and local (must be once)", i, seen[i]));
  defined_ = true;
}

int64_t RegisterLayout::num_threads() const {
  int64_t p = 1;
  for (int e : spatial_) p *= e < 0 ? -int64_t(e) : mode_shape_[e];
  return p;
}

int64_t RegisterLayout::local_size() const {
  int64_t p = 1;
  for (int e : local_) p *= mode_shape_[e];
  return p;
}

int64_t RegisterLayout::num_elements() const { return product(shape_); }

bool RegisterLayout::is_replicated() const {
  return std::any_of(spatial_.begin(), spatial_.end(), [](int e) { return e < -1; });
}

std::vector<int64_t> RegisterLayout::map(int64_t thread, int64_t slot) const {
  require_defined(*this, "map");
  if (thread < 0 || thread >= num_threads() || slot < 0 || slot >= local_size())
    throw InternalError(fmt::format("map({}, {}) outside {} threads x {} slots of {}", thread, slot, num_threads(),
                                    local_size(), str()));
  std::vector<int64_t> digit(mode_shape_.size(), 0);
  for (int i = int(spatial_.size()) - 1; i >= 0; --i) {
    int e = spatial_[i];
    int64_t extent = e < 0 ? -int64_t(e) : mode_shape_[e];
    if (e >= 0) digit[e] = thread % extent;
    thread /= extent;
  }
  for (int i = int(local_.size()) - 1; i >= 0; --i) {
    int e = local_[i];
    digit[e] = slot % mode_shape_[e];
    slot /= mode_shape_[e];
  }
  std::vector<int64_t> index(shape_.size(), 0);
  for (size_t m = 0; m < mode_shape_.size(); ++m) index[mode_dim_[m]] = index[mode_dim_[m]] * mode_shape_[m] + digit[m];
  return index;
}

std::vector<std::pair<int64_t, int64_t>> RegisterLayout::owners(const std::vector<int64_t>& index) const {
  require_defined(*this, "owners");
  if (index.size() != shape_.size())
    throw InternalError(fmt::format("owners of a rank-{} index in {}", index.size(), str()));
  for (int d = 0; d < rank(); ++d)
    if (index[d] < 0 || index[d] >= shape_[d]) return {};  // outside the tile: nobody holds it
  // The mode digits of the index, peeled from each dim's minor end.
  std::vector<int64_t> digit(mode_shape_.size(), 0);
  std::vector<int64_t> rest = index;
  for (int m = int(mode_shape_.size()) - 1; m >= 0; --m) {
    digit[m] = rest[mode_dim_[m]] % mode_shape_[m];
    rest[mode_dim_[m]] /= mode_shape_[m];
  }
  std::vector<int64_t> tplace = place_values(spatial_, mode_shape_);
  std::vector<int64_t> splace = place_values(local_, mode_shape_);
  int64_t base = 0, slot = 0;
  std::vector<std::pair<int64_t, int64_t>> replicas;  // (place, extent) of replicated axes
  for (size_t i = 0; i < spatial_.size(); ++i) {
    int e = spatial_[i];
    if (e >= 0)
      base += digit[e] * tplace[i];
    else if (e < -1)
      replicas.push_back({tplace[i], -int64_t(e)});
  }
  for (size_t i = 0; i < local_.size(); ++i) slot += digit[local_[i]] * splace[i];
  // Every value of the replicated digits, the most significant varying slowest, so that
  // the owners come out in ascending thread order.
  std::vector<std::pair<int64_t, int64_t>> out;
  std::vector<int64_t> r(replicas.size(), 0);
  while (true) {
    int64_t t = base;
    for (size_t i = 0; i < replicas.size(); ++i) t += r[i] * replicas[i].first;
    out.push_back({t, slot});
    int i = int(replicas.size()) - 1;
    while (i >= 0 && ++r[i] == replicas[i].second) r[i--] = 0;
    if (i < 0) break;
  }
  return out;
}

std::vector<Expr> RegisterLayout::index_exprs(const Expr& thread, int64_t slot) const {
  require_defined(*this, "index_exprs");
  if (!thread.defined() || !thread.dtype().is_integer())
    throw InternalError(fmt::format("index_exprs needs an integer thread expression ({})", str()));
  if (slot < 0 || slot >= local_size())
    throw InternalError(fmt::format("index_exprs: slot {} outside {} slots of {}", slot, local_size(), str()));
  // The canonical form has the fewest digits, hence the smallest expressions.
  Repr c = canonicalize(to_repr(*this));
  int nm = int(c.ext.size());
  std::vector<Expr> digit(nm);
  std::vector<int64_t> const_digit(nm, 0);
  std::vector<int64_t> tplace = place_values(c.spatial, c.ext);
  int64_t higher = 1;  // product of the extents more significant than the current entry
  for (size_t i = 0; i < c.spatial.size(); ++i) {
    int e = c.spatial[i];
    int64_t extent = e < 0 ? -int64_t(e) : c.ext[e];
    if (e >= 0) {
      // thread < num_threads, so the most significant digit needs no "% extent".
      Expr d = tplace[i] == 1 ? thread : thread / Expr(tplace[i]);
      if (higher > 1) d = d % Expr(extent);
      digit[e] = d;
    }
    higher *= extent;
  }
  for (int i = int(c.local.size()) - 1; i >= 0; --i) {
    int e = c.local[i];
    const_digit[e] = slot % c.ext[e];
    slot /= c.ext[e];
  }
  std::vector<Expr> index(c.shape.size());
  std::vector<int64_t> constant(c.shape.size(), 0), place(c.shape.size(), 1);
  // Minor to major, so that each mode's place value is the product of the modes after it.
  std::vector<std::vector<Expr>> terms(c.shape.size());
  for (int m = nm - 1; m >= 0; --m) {
    int d = c.dim[m];
    if (digit[m].defined())
      terms[d].push_back(place[d] == 1 ? digit[m] : digit[m] * Expr(place[d]));
    else
      constant[d] += const_digit[m] * place[d];
    place[d] *= c.ext[m];
  }
  for (size_t d = 0; d < c.shape.size(); ++d) {
    Expr acc;
    for (auto it = terms[d].rbegin(); it != terms[d].rend(); ++it) acc = acc.defined() ? acc + *it : *it;
    if (!acc.defined())
      acc = int_const(constant[d], thread.dtype());
    else if (constant[d] != 0)
      acc = acc + Expr(constant[d]);
    index[d] = acc;
  }
  return index;
}

RegisterLayout RegisterLayout::operator*(const RegisterLayout& inner) const {
  require_defined(*this, "composition");
  require_defined(inner, "composition");
  int r = std::max(rank(), inner.rank());
  int oa = r - rank(), ob = r - inner.rank();
  Repr out;
  std::vector<int> amap(mode_shape_.size()), bmap(inner.mode_shape_.size());
  for (int d = 0; d < r; ++d) {
    int64_t ea = d >= oa ? shape_[d - oa] : 1, eb = d >= ob ? inner.shape_[d - ob] : 1;
    out.shape.push_back(checked_mul(ea, eb, "tile extent"));
    for (size_t m = 0; m < mode_shape_.size(); ++m)
      if (d >= oa && mode_dim_[m] == d - oa) amap[m] = out.add_mode(mode_shape_[m], d);
    for (size_t m = 0; m < inner.mode_shape_.size(); ++m)
      if (d >= ob && inner.mode_dim_[m] == d - ob) bmap[m] = out.add_mode(inner.mode_shape_[m], d);
  }
  for (int e : spatial_) out.spatial.push_back(e < 0 ? e : amap[e]);
  for (int e : inner.spatial_) out.spatial.push_back(e < 0 ? e : bmap[e]);
  for (int e : local_) out.local.push_back(amap[e]);
  for (int e : inner.local_) out.local.push_back(bmap[e]);
  return finish(out);
}

std::optional<RegisterLayout> RegisterLayout::divide(const RegisterLayout& inner) const {
  require_defined(*this, "divide");
  require_defined(inner, "divide");
  Repr a = canonicalize(to_repr(*this));
  Repr b = canonicalize(to_repr(inner));
  int ra = int(a.shape.size()), rb = int(b.shape.size());
  if (rb > ra) return std::nullopt;
  int off = ra - rb;

  // Split a's modes from the minor end of each dim so that b's modes appear as whole
  // modes. pieces[m] lists the extents of a's mode m after splitting, major to minor;
  // claim[m][k] is the b mode that piece k stands for (-1: it stays with the quotient).
  int na = int(a.ext.size()), nb = int(b.ext.size());
  std::vector<std::vector<int64_t>> pieces(na);
  std::vector<std::vector<int>> claim(na);
  for (int m = 0; m < na; ++m) {
    pieces[m] = {a.ext[m]};
    claim[m] = {-1};
  }
  for (int d = 0; d < ra; ++d) {
    std::vector<int> am, bm;
    for (int m = 0; m < na; ++m)
      if (a.dim[m] == d) am.push_back(m);
    if (d >= off)
      for (int m = 0; m < nb; ++m)
        if (b.dim[m] == d - off) bm.push_back(m);
    if (d >= off && a.shape[d] % b.shape[d - off] != 0) return std::nullopt;
    int i = int(am.size()) - 1;
    for (int j = int(bm.size()) - 1; j >= 0; --j) {
      if (i < 0) return std::nullopt;
      int m = am[i];
      int64_t rest = pieces[m].front(), want = b.ext[bm[j]];
      if (rest % want != 0) return std::nullopt;
      // Peel `want` off the unclaimed major piece of a's mode m.
      pieces[m].front() = want;
      claim[m].front() = bm[j];
      if (rest != want) {
        pieces[m].insert(pieces[m].begin(), rest / want);
        claim[m].insert(claim[m].begin(), -1);
      } else {
        --i;
      }
    }
  }

  // The split form of a: piece ids in mode order; b's modes mapped onto them.
  std::vector<std::vector<int>> piece_id(na);
  std::vector<int64_t> piece_ext;
  std::vector<int> piece_dim, piece_claim;
  std::vector<int> b_to_piece(nb, -1);
  for (int m = 0; m < na; ++m)
    for (size_t k = 0; k < pieces[m].size(); ++k) {
      piece_id[m].push_back(int(piece_ext.size()));
      if (claim[m][k] >= 0) b_to_piece[claim[m][k]] = int(piece_ext.size());
      piece_ext.push_back(pieces[m][k]);
      piece_dim.push_back(a.dim[m]);
      piece_claim.push_back(claim[m][k]);
    }
  for (int x : b_to_piece)
    if (x < 0) return std::nullopt;
  auto split_list = [&](const std::vector<int>& list) {
    std::vector<int> out;
    for (int e : list) {
      if (e < 0)
        out.push_back(e);
      else
        for (int p : piece_id[e]) out.push_back(p);
    }
    return out;
  };
  std::vector<int> as = split_list(a.spatial), al = split_list(a.local);

  // The tails of a's lists must be b's lists; the heads form the quotient's lists. The
  // first entry of b's spatial list may be a replicated axis that the canonical form of
  // the product merged with the quotient's last one.
  auto match_tail = [&](const std::vector<int>& alist, const std::vector<int>& blist,
                        std::vector<int>& head) -> bool {
    if (blist.size() > alist.size()) return false;
    size_t h = alist.size() - blist.size();
    head.assign(alist.begin(), alist.begin() + h);
    for (size_t i = 0; i < blist.size(); ++i) {
      int ea = alist[h + i], eb = blist[i];
      if (eb >= 0) {
        if (ea != b_to_piece[eb]) return false;
      } else {
        if (ea >= 0) return false;
        int64_t xa = -int64_t(ea), xb = -int64_t(eb);
        if (i == 0 && xa % xb == 0) {
          if (xa != xb) head.push_back(encode_replicated(xa / xb));
        } else if (xa != xb) {
          return false;
        }
      }
    }
    for (int e : head)
      if (e >= 0 && piece_claim[e] >= 0) return false;
    return true;
  };
  std::vector<int> cs, cl;
  if (!match_tail(as, b.spatial, cs) || !match_tail(al, b.local, cl)) return std::nullopt;

  Repr c;
  for (int d = 0; d < ra; ++d) c.shape.push_back(d >= off ? a.shape[d] / b.shape[d - off] : a.shape[d]);
  std::vector<int> cmap(piece_ext.size(), -1);
  for (size_t p = 0; p < piece_ext.size(); ++p)
    if (piece_claim[p] < 0) cmap[p] = c.add_mode(piece_ext[p], piece_dim[p]);
  for (int e : cs) c.spatial.push_back(e < 0 ? e : cmap[e]);
  for (int e : cl) c.local.push_back(cmap[e]);
  RegisterLayout q = finish(c);
  // The construction is exact, but a quotient is only worth returning if it provably
  // recomposes to this layout.
  if (q * inner != *this) return std::nullopt;
  return q;
}

std::optional<RegisterLayout> RegisterLayout::reshape(const std::vector<int64_t>& shape) const {
  require_defined(*this, "reshape");
  for (int64_t e : shape)
    if (e < 1) return std::nullopt;
  int64_t total = 1;
  for (int64_t e : shape) {
    if (total > kMaxProduct / e) return std::nullopt;
    total *= e;
  }
  if (total != num_elements()) return std::nullopt;
  Repr a = canonicalize(to_repr(*this));
  // The modes in row-major order of all dims are the digits of the linear index; regroup
  // them into the new dims, splitting a mode where a new dim boundary falls inside it.
  // pieces[m]: extents that mode m splits into (major to minor) and their new dims.
  int na = int(a.ext.size());
  std::vector<std::vector<std::pair<int64_t, int>>> pieces(na);
  int m = 0;
  int64_t rest = na > 0 ? a.ext[0] : 1;  // the part of mode m not yet placed
  for (int d = 0; d < int(shape.size()); ++d) {
    int64_t p = 1;
    while (p < shape[d]) {
      if (m >= na) return std::nullopt;
      if (shape[d] % (p * rest) == 0) {
        pieces[m].push_back({rest, d});
        p *= rest;
        if (++m < na) rest = a.ext[m];
      } else {
        int64_t need = shape[d] / p;  // p divides shape[d] by construction
        if (rest % need != 0) return std::nullopt;
        pieces[m].push_back({need, d});
        rest /= need;
        p = shape[d];
      }
    }
  }
  if (m != na) return std::nullopt;
  Repr r;
  r.shape = shape;
  std::vector<std::vector<int>> ids(na);
  for (int i = 0; i < na; ++i)
    for (auto [e, d] : pieces[i]) ids[i].push_back(r.add_mode(e, d));
  for (int e : a.spatial) {
    if (e < 0)
      r.spatial.push_back(e);
    else
      r.spatial.insert(r.spatial.end(), ids[e].begin(), ids[e].end());
  }
  for (int e : a.local) r.local.insert(r.local.end(), ids[e].begin(), ids[e].end());
  return finish(r);
}

RegisterLayout RegisterLayout::permute(const std::vector<int>& dims) const {
  require_defined(*this, "permute");
  std::vector<int> seen(rank(), 0);
  bool ok = int(dims.size()) == rank();
  for (int d : dims) {
    if (d < 0 || d >= rank() || seen[d]++) ok = false;
  }
  if (!ok)
    throw InternalError(fmt::format("permute({}) is not a permutation of the dims of {}",
                                    fmt::join(dims, ", "), str()));
  Repr r;
  std::vector<int> remap(mode_shape_.size(), -1);
  for (int i = 0; i < rank(); ++i) {
    r.shape.push_back(shape_[dims[i]]);
    for (size_t m = 0; m < mode_shape_.size(); ++m)
      if (mode_dim_[m] == dims[i]) remap[m] = r.add_mode(mode_shape_[m], i);
  }
  for (int e : spatial_) r.spatial.push_back(e < 0 ? e : remap[e]);
  for (int e : local_) r.local.push_back(remap[e]);
  return finish(r);
}

RegisterLayout RegisterLayout::reduce(const std::vector<int>& dims, bool keepdim) const {
  require_defined(*this, "reduce");
  std::vector<bool> reduced(rank(), false);
  for (int d : dims) {
    if (d < 0 || d >= rank() || reduced[d])
      throw InternalError(fmt::format("reduce over dims ({}) of {}: bad or repeated dim", fmt::join(dims, ", "), str()));
    reduced[d] = true;
  }
  Repr r;
  std::vector<int> new_dim(rank(), -1);
  for (int d = 0; d < rank(); ++d) {
    if (!reduced[d] || keepdim) {
      new_dim[d] = int(r.shape.size());
      r.shape.push_back(reduced[d] ? 1 : shape_[d]);
    }
  }
  std::vector<int> remap(mode_shape_.size(), -1);
  for (size_t m = 0; m < mode_shape_.size(); ++m)
    if (!reduced[mode_dim_[m]]) remap[m] = r.add_mode(mode_shape_[m], new_dim[mode_dim_[m]]);
  // A spatial mode of a reduced dim keeps its thread digit, which now selects no element:
  // the threads that differed in it hold the same (reduced) elements.
  for (int e : spatial_) {
    if (e < 0)
      r.spatial.push_back(e);
    else if (remap[e] >= 0)
      r.spatial.push_back(remap[e]);
    else
      r.spatial.push_back(encode_replicated(mode_shape_[e]));
  }
  for (int e : local_)
    if (remap[e] >= 0) r.local.push_back(remap[e]);
  return finish(r);
}

RegisterLayout RegisterLayout::canonical() const {
  if (!defined_) return *this;
  return finish(to_repr(*this));
}

bool RegisterLayout::operator==(const RegisterLayout& o) const {
  if (!defined_ || !o.defined_) return defined_ == o.defined_;
  Repr a = canonicalize(to_repr(*this)), b = canonicalize(to_repr(o));
  return a.shape == b.shape && a.ext == b.ext && a.spatial == b.spatial && a.local == b.local;
}

std::string RegisterLayout::str() const {
  if (!defined_) return "layout(undefined)";
  return fmt::format("layout(shape={}, modes={}, spatial={}, local={})", list_str(shape_), list_str(mode_shape_),
                     entries_str(spatial_), entries_str(local_));
}

// --- primitives --------------------------------------------------------------------------

namespace {
RegisterLayout primitive(const std::vector<int64_t>& shape, bool is_spatial, bool column) {
  std::vector<int> order(shape.size());
  std::iota(order.begin(), order.end(), 0);
  // Column-major: the first dim varies fastest, i.e. it is the least significant digit.
  if (column) std::reverse(order.begin(), order.end());
  std::vector<int> none;
  RegisterLayout raw(shape, shape, is_spatial ? order : none, is_spatial ? none : order);
  return raw.canonical();
}
}  // namespace

RegisterLayout local(const std::vector<int64_t>& shape) { return primitive(shape, false, false); }
RegisterLayout column_local(const std::vector<int64_t>& shape) { return primitive(shape, false, true); }
RegisterLayout spatial(const std::vector<int64_t>& shape) { return primitive(shape, true, false); }
RegisterLayout column_spatial(const std::vector<int64_t>& shape) { return primitive(shape, true, true); }

RegisterLayout replicated(int64_t num_threads) {
  return RegisterLayout({}, {}, {encode_replicated(num_threads)}, {}).canonical();
}

// --- Swizzle -----------------------------------------------------------------------------

namespace {
void check_swizzle(const Swizzle& s) {
  if (s.bits < 0 || s.base < 0 || s.shift < 0 || s.bits + s.base + s.shift > 62)
    throw InternalError(fmt::format("malformed swizzle (bits={}, base={}, shift={})", s.bits, s.base, s.shift));
}
}  // namespace

int64_t Swizzle::apply(int64_t offset) const {
  if (none()) return offset;
  check_swizzle(*this);
  int64_t mask = ((int64_t(1) << bits) - 1) << base;
  return offset ^ ((offset >> shift) & mask);
}

Expr Swizzle::apply(const Expr& offset) const {
  if (none()) return offset;
  check_swizzle(*this);
  if (offset.is_int_const()) return int_const(apply(offset.int_value()), offset.dtype());
  int64_t mask = ((int64_t(1) << bits) - 1) << base;
  Expr shifted = shift == 0 ? offset : (offset >> Expr(int64_t(shift)));
  return offset ^ (shifted & Expr(mask));
}

// --- SharedLayout ------------------------------------------------------------------------

SharedLayout::SharedLayout(std::vector<int64_t> shape, std::vector<int64_t> strides, Swizzle swizzle)
    : shape_(std::move(shape)), strides_(std::move(strides)), swizzle_(swizzle) {
  auto fail = [&](const std::string& problem) {
    throw InternalError(fmt::format("malformed shared layout (shape={}, strides={}): {}", list_str(shape_),
                                    list_str(strides_), problem));
  };
  if (shape_.size() != strides_.size())
    fail(fmt::format("{} extents but {} strides", shape_.size(), strides_.size()));
  for (int64_t e : shape_)
    if (e < 1) fail(fmt::format("extent {} is not positive", e));
  for (int64_t s : strides_)
    if (s < 0) fail(fmt::format("stride {} is negative", s));
  // The largest offset must be representable.
  int64_t max_off = 0;
  for (size_t i = 0; i < shape_.size(); ++i) {
    int64_t t = 0;
    if (__builtin_mul_overflow(shape_[i] - 1, strides_[i], &t) || __builtin_add_overflow(max_off, t, &max_off) ||
        max_off > kMaxProduct)
      fail("offsets overflow");
  }
  if (swizzle_.none())
    swizzle_ = {};  // every identity swizzle is the same swizzle
  else if (swizzle_.bits < 0 || swizzle_.base < 0 || swizzle_.shift < 0 ||
           swizzle_.bits + swizzle_.base + swizzle_.shift > 30)
    fail(fmt::format("malformed swizzle ({}, {}, {})", swizzle_.bits, swizzle_.base, swizzle_.shift));
  defined_ = true;
}

SharedLayout SharedLayout::row_major(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (int i = int(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s = checked_mul(s, std::max<int64_t>(shape[i], 1), "shared stride");
  }
  return SharedLayout(shape, strides);
}

SharedLayout SharedLayout::row_major_swizzled(const std::vector<int64_t>& shape, int64_t elem_bytes) {
  SharedLayout plain = row_major(shape);
  if (shape.size() < 2 || elem_bytes < 1 || 16 % elem_bytes) return plain;
  int64_t row = shape.back(), rows = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
  if (row * elem_bytes < 32 || (row & (row - 1)) || rows < 8) return plain;
  auto log2 = [](int64_t x) {
    int n = 0;
    while ((int64_t(1) << n) < x) ++n;
    return n;
  };
  Swizzle z;
  z.base = log2(16 / elem_bytes);  // 16-byte units
  if (row * elem_bytes <= 128) {
    // Rows of 32, 64 or 128 bytes: TMA's 32B / 64B / 128B swizzle (units XOR address bits
    // 7..9), so a TMA box of the tile writes exactly this layout.
    z.bits = log2(row * elem_bytes / 16);
    z.shift = 3;
  } else {
    z.bits = 3;
    z.shift = log2(row) - z.base;  // XOR in the row index
  }
  SharedLayout l(shape, plain.strides(), z);
  if (l.storage_elements() != plain.storage_elements()) return plain;  // never grow the tile
  return l;
}

SharedLayout SharedLayout::column_major(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    strides[i] = s;
    s = checked_mul(s, std::max<int64_t>(shape[i], 1), "shared stride");
  }
  return SharedLayout(shape, strides);
}

// A swizzle moves an offset only within its aligned block of 2^(base + bits) elements,
// so max offset + 1 rounded up to that block would suffice; we round up to the whole
// period 2^(bits + base + shift) instead so that a buffer that follows a swizzled one
// starts on a period boundary too (swizzles are computed from absolute offsets).
int64_t SharedLayout::storage_elements() const {
  if (!defined_) throw InternalError("storage_elements of an undefined shared layout");
  int64_t n = 1;
  for (size_t i = 0; i < shape_.size(); ++i) n += (shape_[i] - 1) * strides_[i];
  if (!swizzle_.none()) {
    int64_t period = int64_t(1) << (swizzle_.bits + swizzle_.base + swizzle_.shift);
    n = (n + period - 1) / period * period;
  }
  return n;
}

int64_t SharedLayout::offset(const std::vector<int64_t>& index) const {
  if (!defined_) throw InternalError("offset in an undefined shared layout");
  if (index.size() != shape_.size())
    throw InternalError(fmt::format("rank-{} index into {}", index.size(), str()));
  int64_t off = 0;
  for (size_t i = 0; i < index.size(); ++i) off += index[i] * strides_[i];
  return swizzle_.apply(off);
}

Expr SharedLayout::offset(const std::vector<Expr>& index) const {
  if (!defined_) throw InternalError("offset in an undefined shared layout");
  if (index.size() != shape_.size())
    throw InternalError(fmt::format("rank-{} index into {}", index.size(), str()));
  // Constant indices fold into one constant; zero strides and unit multipliers vanish.
  // Terms that are multiples of the swizzle period (e.g. the stage of a multi-buffered
  // tile) leave the swizzle's bits alone, so they are added outside it: the swizzled part
  // then does not depend on them (cheaper code, and loop-invariant where they vary).
  int64_t period = swizzle_.none() ? 0 : int64_t(1) << (swizzle_.bits + swizzle_.base + swizzle_.shift);
  Expr inner, outer;
  int64_t constant = 0;
  DataType t = dtypes::int32;
  auto add = [](Expr& acc, const Expr& term) { acc = acc.defined() ? acc + term : term; };
  for (size_t i = 0; i < index.size(); ++i) {
    if (!index[i].defined()) throw InternalError(fmt::format("undefined index {} into {}", i, str()));
    if (index[i].dtype().is_integer()) t = index[i].dtype();
    if (strides_[i] == 0) continue;
    if (index[i].is_int_const()) {
      constant += index[i].int_value() * strides_[i];
      continue;
    }
    Expr term = strides_[i] == 1 ? index[i] : index[i] * Expr(strides_[i]);
    add(period && strides_[i] % period == 0 ? outer : inner, term);
  }
  int64_t outer_constant = period && constant >= 0 ? constant / period * period : 0;
  constant -= outer_constant;
  if (!inner.defined()) inner = int_const(constant, t);
  else if (constant != 0) inner = inner + Expr(constant);
  Expr result = swizzle_.apply(inner);
  if (outer.defined()) result = outer + result;
  if (outer_constant != 0) result = result + Expr(outer_constant);
  return result;
}

bool SharedLayout::is_injective() const {
  if (!defined_) throw InternalError("is_injective of an undefined shared layout");
  constexpr int64_t kBruteForceLimit = int64_t(1) << 20;
  int64_t total = 1;
  bool small = true;
  for (int64_t e : shape_) {
    if (total > kBruteForceLimit / e) {
      small = false;
      break;
    }
    total *= e;
  }
  if (small) {
    std::vector<int64_t> offs;
    offs.reserve(total);
    std::vector<int64_t> idx(shape_.size(), 0);
    for (int64_t n = 0; n < total; ++n) {
      offs.push_back(offset(idx));
      for (int d = int(idx.size()) - 1; d >= 0 && ++idx[d] == shape_[d]; --d) idx[d] = 0;
    }
    std::sort(offs.begin(), offs.end());
    return std::adjacent_find(offs.begin(), offs.end()) == offs.end();
  }
  // Too large to enumerate: a sufficient test. The swizzle flips bit i by bit i + shift,
  // a unitriangular map over GF(2) when shift > 0 and so a bijection; the linear part is
  // injective when its dims, sorted by stride, each step over the span of the previous.
  if (!swizzle_.none() && swizzle_.shift == 0) return false;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, extent)
  for (size_t i = 0; i < shape_.size(); ++i)
    if (shape_[i] > 1) dims.push_back({strides_[i], shape_[i]});
  std::sort(dims.begin(), dims.end());
  int64_t span = 1;  // offsets reached so far are < span
  for (auto [stride, extent] : dims) {
    if (stride < span) return false;
    span = stride * (extent - 1) + span;
  }
  return true;
}

SharedLayout SharedLayout::drop_leading(int dims) const {
  if (!defined_) throw InternalError("drop_leading of an undefined shared layout");
  if (dims < 0 || dims > rank()) throw InternalError(fmt::format("drop_leading({}) of {}", dims, str()));
  // The slice keeps the swizzle; it is exact when the slice starts on a swizzle period.
  return SharedLayout(std::vector<int64_t>(shape_.begin() + dims, shape_.end()),
                      std::vector<int64_t>(strides_.begin() + dims, strides_.end()), swizzle_);
}

bool SharedLayout::operator==(const SharedLayout& o) const {
  return defined_ == o.defined_ && shape_ == o.shape_ && strides_ == o.strides_ && swizzle_ == o.swizzle_;
}

std::string SharedLayout::str() const {
  if (!defined_) return "shared_layout(undefined)";
  std::string s = fmt::format("shared_layout(shape={}, strides={}", list_str(shape_), list_str(strides_));
  if (!swizzle_.none()) s += fmt::format(", swizzle=({}, {}, {})", swizzle_.bits, swizzle_.base, swizzle_.shift);
  return s + ")";
}

}  // namespace tilus
