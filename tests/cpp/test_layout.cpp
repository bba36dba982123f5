// Tests of the register-layout algebra and of shared-memory layouts. Most tests draw
// random layouts (fixed seeds) and compare the algebra against brute-force tables of
// map() over the whole (thread, slot) space.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tilus/ir/error.h"
#include "tilus/ir/expr.h"
#include "tilus/ir/layout.h"

namespace tilus {

// Readable failure messages.
void PrintTo(const RegisterLayout& l, std::ostream* os) { *os << l.str(); }
void PrintTo(const SharedLayout& l, std::ostream* os) { *os << l.str(); }

namespace {

using Index = std::vector<int64_t>;
using Owner = std::pair<int64_t, int64_t>;

int64_t linearize(const Index& index, const std::vector<int64_t>& shape) {
  int64_t l = 0;
  for (size_t d = 0; d < shape.size(); ++d) l = l * shape[d] + index[d];
  return l;
}

// map() over every (thread, slot), thread-major.
std::vector<Index> map_table(const RegisterLayout& l) {
  std::vector<Index> t;
  for (int64_t th = 0; th < l.num_threads(); ++th)
    for (int64_t s = 0; s < l.local_size(); ++s) t.push_back(l.map(th, s));
  return t;
}

std::vector<int64_t> linear_table(const RegisterLayout& l) {
  std::vector<int64_t> t;
  for (auto& i : map_table(l)) t.push_back(linearize(i, l.shape()));
  return t;
}

int64_t replication(const RegisterLayout& l) {
  int64_t r = 1;
  for (int e : l.spatial_modes())
    if (e < 0) r *= -int64_t(e);
  return r;
}

int64_t pick(std::mt19937& rng, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }

RegisterLayout random_primitive(std::mt19937& rng, int max_extent = 4) {
  int kind = int(pick(rng, 0, 9));
  if (kind >= 8) return replicated(pick(rng, 1, 4));
  int rank = int(pick(rng, 1, 3));
  std::vector<int64_t> shape(rank);
  for (auto& e : shape) e = pick(rng, 1, max_extent);
  switch (kind % 4) {
    case 0: return local(shape);
    case 1: return column_local(shape);
    case 2: return spatial(shape);
    default: return column_spatial(shape);
  }
}

// A product of 1..3 random primitives whose (thread, slot) space has at most `limit` points.
RegisterLayout random_layout(std::mt19937& rng, int64_t limit = 4096) {
  while (true) {
    int n = int(pick(rng, 1, 3));
    RegisterLayout l = random_primitive(rng);
    for (int i = 1; i < n; ++i) l = l * random_primitive(rng);
    if (l.num_threads() * l.local_size() <= limit) return l;
  }
}

std::vector<int64_t> ones(int rank) { return std::vector<int64_t>(rank, 1); }

// --- primitives --------------------------------------------------------------------------

TEST(RegisterLayout, Primitives) {
  RegisterLayout l = local({2, 4});
  EXPECT_EQ(l.num_threads(), 1);
  EXPECT_EQ(l.local_size(), 8);
  for (int64_t s = 0; s < 8; ++s) EXPECT_EQ(l.map(0, s), (Index{s / 4, s % 4}));

  RegisterLayout cl = column_local({2, 4});
  EXPECT_EQ(cl.local_size(), 8);
  for (int64_t s = 0; s < 8; ++s) EXPECT_EQ(cl.map(0, s), (Index{s % 2, s / 2}));

  RegisterLayout sp = spatial({2, 4});
  EXPECT_EQ(sp.num_threads(), 8);
  EXPECT_EQ(sp.local_size(), 1);
  for (int64_t t = 0; t < 8; ++t) EXPECT_EQ(sp.map(t, 0), (Index{t / 4, t % 4}));

  RegisterLayout cs = column_spatial({2, 4});
  for (int64_t t = 0; t < 8; ++t) EXPECT_EQ(cs.map(t, 0), (Index{t % 2, t / 2}));

  RegisterLayout r = replicated(4);
  EXPECT_EQ(r.rank(), 0);
  EXPECT_EQ(r.num_threads(), 4);
  EXPECT_EQ(r.local_size(), 1);
  EXPECT_EQ(r.num_elements(), 1);
  EXPECT_TRUE(r.is_replicated());
  EXPECT_EQ(r.spatial_modes(), (std::vector<int>{-4}));
  for (int64_t t = 0; t < 4; ++t) EXPECT_TRUE(r.map(t, 0).empty());
  EXPECT_EQ(r.owners({}).size(), 4u);

  EXPECT_FALSE(replicated(1).is_replicated());
  EXPECT_EQ(replicated(1), local(std::vector<int64_t>{}));
  EXPECT_FALSE(local({3, 5}).is_replicated());
  EXPECT_EQ(local({3, 5}).num_elements(), 15);
}

TEST(RegisterLayout, Str) {
  RegisterLayout c = local({2, 1}) * spatial({8, 4}) * local({1, 2});
  EXPECT_EQ(c.str(), "layout(shape=[16, 8], modes=[2, 8, 4, 2], spatial=[1, 2], local=[0, 3])");
  EXPECT_EQ((spatial({2}) * replicated(4) * local({2})).str(),
            "layout(shape=[4], modes=[2, 2], spatial=[0, r4], local=[1])");
  EXPECT_EQ(replicated(8).str(), "layout(shape=[], modes=[], spatial=[r8], local=[])");
  EXPECT_EQ(column_local({2, 3}).str(), "layout(shape=[2, 3], modes=[2, 3], spatial=[], local=[1, 0])");
  EXPECT_EQ(local({1, 4}).str(), "layout(shape=[1, 4], modes=[4], spatial=[], local=[0])");
  EXPECT_EQ(RegisterLayout().str(), "layout(undefined)");
  // Raw layouts print as given (not canonicalized).
  RegisterLayout raw({4}, {2, 2}, {0, 1}, {});
  EXPECT_EQ(raw.str(), "layout(shape=[4], modes=[2, 2], spatial=[0, 1], local=[])");
  EXPECT_EQ(raw.canonical().str(), "layout(shape=[4], modes=[4], spatial=[0], local=[])");
}

// --- coverage and owners -----------------------------------------------------------------

void check_coverage(const RegisterLayout& l) {
  SCOPED_TRACE(l.str());
  int64_t rep = replication(l);
  ASSERT_EQ(l.num_threads() * l.local_size(), l.num_elements() * rep);
  EXPECT_EQ(l.is_replicated(), rep > 1);
  std::map<Index, std::vector<Owner>> holders;
  for (int64_t t = 0; t < l.num_threads(); ++t)
    for (int64_t s = 0; s < l.local_size(); ++s) {
      Index i = l.map(t, s);
      ASSERT_EQ(int(i.size()), l.rank());
      for (int d = 0; d < l.rank(); ++d) {
        ASSERT_GE(i[d], 0);
        ASSERT_LT(i[d], l.shape()[d]);
      }
      holders[i].push_back({t, s});
    }
  ASSERT_EQ(int64_t(holders.size()), l.num_elements());  // every element is covered
  for (auto& [index, who] : holders) {
    ASSERT_EQ(int64_t(who.size()), rep);  // exactly `rep` times
    auto got = l.owners(index);
    std::sort(got.begin(), got.end());
    ASSERT_EQ(got, who);
  }
}

TEST(RegisterLayout, PrimitivesCoverTheirTiles) {
  std::mt19937 rng(1);
  for (int it = 0; it < 300; ++it) check_coverage(random_primitive(rng));
}

TEST(RegisterLayout, CompositionsCoverTheirTiles) {
  std::mt19937 rng(2);
  for (int it = 0; it < 400; ++it) check_coverage(random_layout(rng));
}

TEST(RegisterLayout, OwnersOutsideTheTile) {
  RegisterLayout l = spatial({4}) * local({2});
  EXPECT_TRUE(l.owners({8}).empty());
  EXPECT_TRUE(l.owners({-1}).empty());
  EXPECT_THROW(l.owners({1, 1}), InternalError);
  EXPECT_THROW(l.map(8, 0), InternalError);
  EXPECT_THROW(l.map(0, 2), InternalError);
}

// --- composition -------------------------------------------------------------------------

TEST(RegisterLayout, CompositionIsAssociative) {
  std::mt19937 rng(3);
  for (int it = 0; it < 300; ++it) {
    RegisterLayout a = random_primitive(rng), b = random_primitive(rng), c = random_primitive(rng);
    RegisterLayout x = (a * b) * c, y = a * (b * c);
    SCOPED_TRACE(a.str() + " * " + b.str() + " * " + c.str());
    EXPECT_EQ(x, y);
    EXPECT_EQ(x.str(), y.str());
    EXPECT_EQ(x.shape(), y.shape());
    if (x.num_threads() * x.local_size() <= 8192) {
      EXPECT_EQ(map_table(x), map_table(y));
    }
  }
}

TEST(RegisterLayout, KroneckerFormula) {
  std::mt19937 rng(4);
  for (int it = 0; it < 300; ++it) {
    RegisterLayout a = random_layout(rng, 256), b = random_layout(rng, 256);
    RegisterLayout ab = a * b;
    SCOPED_TRACE(a.str() + " * " + b.str());
    int r = ab.rank();
    ASSERT_EQ(r, std::max(a.rank(), b.rank()));
    ASSERT_EQ(ab.num_threads(), a.num_threads() * b.num_threads());
    ASSERT_EQ(ab.local_size(), a.local_size() * b.local_size());
    // Ranks are right-aligned: shapes pad with leading 1s, indices with leading 0s.
    auto pad = [&](Index v, int64_t fill = 0) {
      v.insert(v.begin(), r - v.size(), fill);
      return v;
    };
    Index sa = pad(a.shape(), 1), sb = pad(b.shape(), 1);
    for (int d = 0; d < r; ++d) EXPECT_EQ(ab.shape()[d], sa[d] * sb[d]);
    for (int k = 0; k < 40; ++k) {
      int64_t ta = pick(rng, 0, a.num_threads() - 1), tb = pick(rng, 0, b.num_threads() - 1);
      int64_t qa = pick(rng, 0, a.local_size() - 1), qb = pick(rng, 0, b.local_size() - 1);
      Index ia = pad(a.map(ta, qa)), ib = pad(b.map(tb, qb));
      Index want(r);
      for (int d = 0; d < r; ++d) want[d] = ia[d] * sb[d] + ib[d];
      ASSERT_EQ(ab.map(ta * b.num_threads() + tb, qa * b.local_size() + qb), want);
    }
  }
}

// --- canonical form ----------------------------------------------------------------------

// An equivalent non-canonical raw layout: every mode split into random factors kept
// consecutive in their list, unit modes and unit replicated axes sprinkled in.
RegisterLayout scramble(const RegisterLayout& l, std::mt19937& rng) {
  struct Item {
    int64_t ext;
    int dim;
  };
  std::vector<Item> items;                       // new modes, in mode order
  std::vector<std::vector<int>> pieces(l.mode_shape().size());
  for (size_t m = 0; m < l.mode_shape().size(); ++m) {
    int64_t e = l.mode_shape()[m];
    int d = l.mode_dim(int(m));
    if (pick(rng, 0, 2) == 0) {
      pieces[m].push_back(int(items.size()));
      items.push_back({1, d});
    }
    for (int64_t f = 2; f <= e; ++f) {
      while (e % f == 0 && e > f && pick(rng, 0, 1)) {
        pieces[m].push_back(int(items.size()));
        items.push_back({f, d});
        e /= f;
      }
    }
    pieces[m].push_back(int(items.size()));
    items.push_back({e, d});
  }
  std::vector<int64_t> modes;
  for (auto& it : items) modes.push_back(it.ext);
  std::vector<int> sp, lo;
  for (int e : l.spatial_modes()) {
    if (pick(rng, 0, 3) == 0) sp.push_back(-1);
    if (e < 0) {
      sp.push_back(e);
    } else {
      for (int p : pieces[e]) sp.push_back(p);
    }
  }
  if (pick(rng, 0, 3) == 0) sp.push_back(-1);
  for (int e : l.local_modes())
    for (int p : pieces[e]) lo.push_back(p);
  return RegisterLayout(l.shape(), modes, sp, lo);
}

TEST(RegisterLayout, CanonicalForm) {
  std::mt19937 rng(5);
  for (int it = 0; it < 400; ++it) {
    RegisterLayout l = random_layout(rng);
    RegisterLayout raw = scramble(l, rng);
    SCOPED_TRACE(l.str() + " vs " + raw.str());
    EXPECT_EQ(map_table(raw), map_table(l));
    RegisterLayout c = raw.canonical();
    EXPECT_EQ(c.str(), l.str());  // algebra results are canonical
    EXPECT_EQ(c.canonical().str(), c.str());
    EXPECT_EQ(raw, l);
    EXPECT_EQ(map_table(c), map_table(raw));
    for (int64_t e : c.mode_shape()) EXPECT_GT(e, 1);
  }
}

TEST(RegisterLayout, CanonicalMerges) {
  EXPECT_EQ(local({2}) * local({4}), local({8}));
  EXPECT_EQ(spatial({2}) * spatial({4}), spatial({8}));
  EXPECT_EQ(replicated(2) * replicated(3), replicated(6));
  EXPECT_NE(local({2}) * spatial({4}), spatial({4}) * local({2}));
  EXPECT_NE(spatial({2}) * replicated(2), replicated(2) * spatial({2}));
  EXPECT_EQ(local({2, 1}) * local({2, 5}), local({4, 5}));
  // The slot digits interleave the dims (row, col, row, col): not a plain local tile.
  EXPECT_NE(local({2, 3}) * local({2, 5}), local({4, 15}));
  // Adjacent in the list but in different dims: no merge.
  EXPECT_EQ(local({2, 4}).mode_shape(), (std::vector<int64_t>{2, 4}));
  EXPECT_NE(local({2, 4}), column_local({2, 4}));
  // Adjacent in the dim but in reversed list order: no merge.
  RegisterLayout rev({8}, {2, 4}, {}, {1, 0});
  EXPECT_EQ(rev.canonical().mode_shape(), (std::vector<int64_t>{2, 4}));
  EXPECT_NE(rev, local({8}));
  // Shapes differ: never equal.
  EXPECT_NE(local({4}), local({1, 4}));
  EXPECT_EQ(RegisterLayout(), RegisterLayout());
  EXPECT_NE(RegisterLayout(), local({1}));
}

// --- divide ------------------------------------------------------------------------------

TEST(RegisterLayout, DivideInvertsComposition) {
  std::mt19937 rng(6);
  for (int it = 0; it < 400; ++it) {
    RegisterLayout a = random_layout(rng, 512), b = random_layout(rng, 512);
    RegisterLayout ab = a * b;
    SCOPED_TRACE(a.str() + " * " + b.str() + " = " + ab.str());
    auto c = ab.divide(b);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(*c * b, ab);
    // The quotient has the product's rank; a padded to that rank is the same layout.
    EXPECT_EQ(*c, local(ones(ab.rank())) * a);
    if (a.rank() >= b.rank()) {
      EXPECT_EQ(*c, a);
    }
    EXPECT_EQ(map_table(*c * b), map_table(ab));
    // Dividing by itself leaves a single-thread, single-slot unit tile.
    auto one = ab.divide(ab);
    ASSERT_TRUE(one.has_value());
    EXPECT_EQ(*one, local(ones(ab.rank())));
  }
}

TEST(RegisterLayout, DivideRandomPairsIsSound) {
  // Whenever divide answers, the answer recomposes exactly.
  std::mt19937 rng(7);
  int answered = 0;
  for (int it = 0; it < 1000; ++it) {
    RegisterLayout a = random_layout(rng), b = random_primitive(rng, 2);
    auto c = a.divide(b);
    if (!c) continue;
    ++answered;
    EXPECT_EQ(*c * b, a) << a.str() << " / " << b.str();
  }
  EXPECT_GT(answered, 50);
}

TEST(RegisterLayout, DivideSplitsMergedModes) {
  // The canonical product merges the quotient's and the divisor's adjacent modes.
  auto c = local({8}).divide(local({2}));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(*c, local({4}));
  auto r = replicated(6).divide(replicated(2));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, replicated(3));
  RegisterLayout x = spatial({4, 2}) * local({2, 2});
  auto q = (replicated(4) * x).divide(replicated(2) * x);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(*q, replicated(2) * local({1, 1}));
}

TEST(RegisterLayout, DivideImpossible) {
  EXPECT_FALSE(local({8}).divide(spatial({2})).has_value());
  EXPECT_FALSE(local({8}).divide(local({3})).has_value());
  EXPECT_FALSE((spatial({4}) * local({2})).divide(local({4})).has_value());
  // The modes line up but the lists are swapped.
  EXPECT_FALSE((spatial({2}) * local({2})).divide(local({2}) * spatial({2})).has_value());
  // The divisor has a higher rank.
  EXPECT_FALSE(local({4}).divide(local({1, 4})).has_value());
  // The divisor's threads are not the least significant ones.
  EXPECT_FALSE((spatial({2}) * replicated(2)).divide(spatial({2})).has_value());
}

// --- reshape -----------------------------------------------------------------------------

std::vector<int64_t> random_factorization(int64_t n, int rank, std::mt19937& rng) {
  std::vector<int64_t> shape(rank, 1);
  if (rank == 0) return shape;
  for (int64_t p = 2; n > 1; ++p)
    while (n % p == 0) {
      shape[pick(rng, 0, rank - 1)] *= p;
      n /= p;
    }
  return shape;
}

void check_reshape(const RegisterLayout& l, const RegisterLayout& r) {
  ASSERT_EQ(r.num_threads(), l.num_threads());
  ASSERT_EQ(r.local_size(), l.local_size());
  ASSERT_EQ(linear_table(r), linear_table(l));
}

TEST(RegisterLayout, ReshapePreservesTheLinearMapping) {
  std::mt19937 rng(8);
  int reshaped = 0;
  for (int it = 0; it < 500; ++it) {
    RegisterLayout l = random_layout(rng);
    SCOPED_TRACE(l.str());
    // Always possible: one flat dim, one dim per mode, the same shape.
    for (auto shape : {std::vector<int64_t>{l.num_elements()}, l.mode_shape(), l.shape()}) {
      if (shape.empty() && l.num_elements() != 1) continue;
      auto r = l.reshape(shape);
      ASSERT_TRUE(r.has_value()) << fmt::format("{}", fmt::join(shape, ","));
      check_reshape(l, *r);
      auto back = r->reshape(l.shape());
      ASSERT_TRUE(back.has_value());
      EXPECT_EQ(*back, l);
    }
    EXPECT_EQ(*l.reshape(l.shape()), l);
    // Random shapes: whenever possible, exact.
    for (int k = 0; k < 4; ++k) {
      auto shape = random_factorization(l.num_elements(), int(pick(rng, 1, 4)), rng);
      auto r = l.reshape(shape);
      if (!r) continue;
      ++reshaped;
      EXPECT_EQ(r->shape(), shape);
      check_reshape(l, *r);
      auto back = r->reshape(l.shape());
      ASSERT_TRUE(back.has_value());
      EXPECT_EQ(*back, l);
    }
  }
  EXPECT_GT(reshaped, 300);
}

TEST(RegisterLayout, ReshapeImpossible) {
  // Linear index = 3 * local + thread: a dim of 3 cannot start inside the local mode of 2.
  RegisterLayout l = local({2}) * spatial({3});
  EXPECT_FALSE(l.reshape({3, 2}).has_value());
  ASSERT_TRUE(l.reshape({2, 3}).has_value());
  EXPECT_EQ(*l.reshape({2, 3}), local({2, 1}) * spatial({1, 3}));
  EXPECT_FALSE(l.reshape({7}).has_value());  // element count differs
  EXPECT_FALSE(l.reshape({6, 0}).has_value());
  EXPECT_TRUE((spatial({4}) * local({4})).reshape({8, 2}).has_value());  // the local 4 splits 2 x 2
  EXPECT_FALSE((local({6}) * spatial({2})).reshape({4, 3}).has_value());
}

TEST(RegisterLayout, ReshapeSplitsAMode) {
  RegisterLayout l = spatial({32}) * local({8});
  auto r = l.reshape({16, 16});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, spatial({16, 2}) * local({1, 8}));
}

// --- permute -----------------------------------------------------------------------------

TEST(RegisterLayout, Permute) {
  std::mt19937 rng(9);
  for (int it = 0; it < 400; ++it) {
    RegisterLayout l = random_layout(rng);
    std::vector<int> dims(l.rank());
    std::iota(dims.begin(), dims.end(), 0);
    std::shuffle(dims.begin(), dims.end(), rng);
    RegisterLayout p = l.permute(dims);
    SCOPED_TRACE(l.str() + " permuted to " + p.str());
    ASSERT_EQ(p.num_threads(), l.num_threads());
    ASSERT_EQ(p.local_size(), l.local_size());
    for (int i = 0; i < l.rank(); ++i) EXPECT_EQ(p.shape()[i], l.shape()[dims[i]]);
    for (int64_t t = 0; t < l.num_threads(); ++t)
      for (int64_t s = 0; s < l.local_size(); ++s) {
        Index a = l.map(t, s), b = p.map(t, s);
        for (int i = 0; i < l.rank(); ++i) ASSERT_EQ(b[i], a[dims[i]]);
      }
    std::vector<int> inv(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) inv[dims[i]] = int(i);
    EXPECT_EQ(p.permute(inv), l);
    EXPECT_EQ(p.permute(inv).str(), l.str());
  }
  EXPECT_EQ(local({2, 4}).permute({1, 0}), column_local({4, 2}));
  EXPECT_EQ(spatial({2, 4}).permute({1, 0}), column_spatial({4, 2}));
  EXPECT_THROW(local({2, 4}).permute({0, 0}), InternalError);
  EXPECT_THROW(local({2, 4}).permute({0}), InternalError);
  EXPECT_THROW(local({2, 4}).permute({0, 2}), InternalError);
}

// --- reduce ------------------------------------------------------------------------------

TEST(RegisterLayout, Reduce) {
  std::mt19937 rng(10);
  for (int it = 0; it < 400; ++it) {
    RegisterLayout l = random_layout(rng);
    if (l.rank() == 0) continue;
    std::vector<int> dims;
    for (int d = 0; d < l.rank(); ++d)
      if (pick(rng, 0, 1)) dims.push_back(d);
    bool keepdim = pick(rng, 0, 1);
    RegisterLayout r = l.reduce(dims, keepdim);
    SCOPED_TRACE(fmt::format("{} reduce({}, {}) = {}", l.str(), fmt::join(dims, ","), keepdim, r.str()));
    std::vector<bool> reduced(l.rank(), false);
    for (int d : dims) reduced[d] = true;
    auto project = [&](const Index& i) {
      Index o;
      for (int d = 0; d < l.rank(); ++d) {
        if (!reduced[d])
          o.push_back(i[d]);
        else if (keepdim)
          o.push_back(0);
      }
      return o;
    };
    std::vector<int64_t> want_shape;
    for (int d = 0; d < l.rank(); ++d)
      if (!reduced[d] || keepdim) want_shape.push_back(reduced[d] ? 1 : l.shape()[d]);
    ASSERT_EQ(r.shape(), want_shape);
    ASSERT_EQ(r.num_threads(), l.num_threads());
    // Each thread holds exactly the projections of what it held before, once each.
    for (int64_t t = 0; t < l.num_threads(); ++t) {
      std::set<Index> before, after;
      for (int64_t s = 0; s < l.local_size(); ++s) before.insert(project(l.map(t, s)));
      for (int64_t s = 0; s < r.local_size(); ++s) after.insert(r.map(t, s));
      ASSERT_EQ(int64_t(after.size()), r.local_size());
      ASSERT_EQ(before, after);
    }
    for (int64_t s = 0; s < r.local_size(); ++s)
      for (int64_t t = 0; t < r.num_threads(); ++t) {
        auto own = r.owners(r.map(t, s));
        ASSERT_TRUE(std::find(own.begin(), own.end(), Owner{t, s}) != own.end());
      }
    bool spatial_reduced = false;
    for (int e : l.spatial_modes())
      if (e >= 0 && reduced[l.mode_dim(e)]) spatial_reduced = true;
    EXPECT_EQ(r.is_replicated(), l.is_replicated() || spatial_reduced);
  }
}

TEST(RegisterLayout, ReduceExamples) {
  RegisterLayout l = local({2, 1}) * spatial({8, 4}) * local({1, 2});
  EXPECT_EQ(l.reduce({1}, true), local({2, 1}) * spatial({8, 1}) * replicated(4) * local({1, 1}));
  EXPECT_EQ(l.reduce({1}, false), local({2}) * spatial({8}) * replicated(4));
  EXPECT_EQ(l.reduce({0, 1}, false), replicated(32));
  EXPECT_EQ(local({4, 8}).reduce({0}, false), local({8}));
  EXPECT_THROW(l.reduce({2}, false), InternalError);
  EXPECT_THROW(l.reduce({0, 0}, false), InternalError);
}

// --- MMA fragments (PTX ISA, mma.sync.aligned.m16n8k16, .f16/.bf16) -----------------------

TEST(RegisterLayout, MmaFragments) {
  RegisterLayout a = column_local({2, 2}) * spatial({8, 4}) * local({1, 2});
  RegisterLayout b = local({2, 1}) * column_spatial({4, 8}) * local({2, 1});
  RegisterLayout c = local({2, 1}) * spatial({8, 4}) * local({1, 2});
  ASSERT_EQ(a.shape(), (std::vector<int64_t>{16, 16}));
  ASSERT_EQ(b.shape(), (std::vector<int64_t>{16, 8}));
  ASSERT_EQ(c.shape(), (std::vector<int64_t>{16, 8}));
  ASSERT_EQ(a.num_threads(), 32);
  ASSERT_EQ(b.num_threads(), 32);
  ASSERT_EQ(c.num_threads(), 32);
  ASSERT_EQ(a.local_size(), 8);
  ASSERT_EQ(b.local_size(), 4);
  ASSERT_EQ(c.local_size(), 4);
  for (int64_t lane = 0; lane < 32; ++lane) {
    int64_t g = lane / 4, t = lane % 4;
    for (int64_t r = 0; r < 8; ++r) {
      int64_t row = g + ((r / 2) % 2) * 8, col = t * 2 + r % 2 + (r / 4) * 8;
      EXPECT_EQ(a.map(lane, r), (Index{row, col})) << "a" << r << " lane " << lane;
    }
    for (int64_t r = 0; r < 4; ++r) {
      EXPECT_EQ(b.map(lane, r), (Index{t * 2 + r % 2 + (r / 2) * 8, g})) << "b" << r << " lane " << lane;
      EXPECT_EQ(c.map(lane, r), (Index{g + (r / 2) * 8, t * 2 + r % 2})) << "c" << r << " lane " << lane;
    }
  }
}

// --- index expressions -------------------------------------------------------------------

int64_t eval_with(const Expr& e, const Var& v, int64_t value) {
  auto r = evaluate(e, [&](const Var& x) -> std::optional<EvalValue> {
    if (x.same_as(v)) return EvalValue{v.dtype(), value, 0.0};
    return std::nullopt;
  });
  EXPECT_TRUE(r.has_value()) << to_string(e);
  return r ? r->i : -1;
}

TEST(RegisterLayout, IndexExprs) {
  std::mt19937 rng(11);
  Var t("t", dtypes::int32);
  for (int it = 0; it < 300; ++it) {
    RegisterLayout l = random_layout(rng);
    SCOPED_TRACE(l.str());
    for (int k = 0; k < 20; ++k) {
      int64_t th = pick(rng, 0, l.num_threads() - 1), s = pick(rng, 0, l.local_size() - 1);
      auto exprs = l.index_exprs(t, s);
      ASSERT_EQ(int(exprs.size()), l.rank());
      Index want = l.map(th, s);
      for (int d = 0; d < l.rank(); ++d) {
        EXPECT_EQ(exprs[d].dtype(), dtypes::int32);
        EXPECT_EQ(eval_with(exprs[d], t, th), want[d]) << to_string(exprs[d]);
      }
    }
  }
}

TEST(RegisterLayout, IndexExprsAreSmall) {
  Var t("t", dtypes::int32);
  // The only digit: the thread itself.
  EXPECT_TRUE(spatial({32}).index_exprs(t, 0)[0].same_as(t));
  // Slot digits fold to constants.
  auto e = local({4}).index_exprs(t, 3);
  ASSERT_TRUE(e[0].is_int_const(3));
  RegisterLayout c = local({2, 1}) * spatial({8, 4}) * local({1, 2});
  auto idx = c.index_exprs(t, 3);
  EXPECT_EQ(to_string(idx[0]), to_string(t / 4 + 8));
  EXPECT_EQ(to_string(idx[1]), to_string(t % 4 * 2 + 1));
  EXPECT_THROW(c.index_exprs(t, 4), InternalError);
}

// --- invalid input -----------------------------------------------------------------------

TEST(RegisterLayout, MalformedRawLayoutsThrow) {
  using V64 = std::vector<int64_t>;
  using V = std::vector<int>;
  EXPECT_THROW(RegisterLayout(V64{4}, V64{2}, V{0}, V{}), InternalError);           // modes run out
  EXPECT_THROW(RegisterLayout(V64{6}, V64{4}, V{0}, V{}), InternalError);           // does not divide
  EXPECT_THROW(RegisterLayout(V64{2}, V64{2, 2}, V{0, 1}, V{}), InternalError);     // extra mode
  EXPECT_THROW(RegisterLayout(V64{4}, V64{4}, V{0}, V{0}), InternalError);          // mode twice
  EXPECT_THROW(RegisterLayout(V64{4}, V64{2, 2}, V{0}, V{}), InternalError);        // mode missing
  EXPECT_THROW(RegisterLayout(V64{4}, V64{4}, V{1}, V{}), InternalError);           // no such mode
  EXPECT_THROW(RegisterLayout(V64{4}, V64{4}, V{}, V{-2}), InternalError);          // replicated local
  EXPECT_THROW(RegisterLayout(V64{0}, V64{}, V{}, V{}), InternalError);             // empty dim
  EXPECT_THROW(RegisterLayout(V64{4}, V64{0, 4}, V{0, 1}, V{}), InternalError);     // zero mode
  EXPECT_THROW(RegisterLayout(V64{}, V64{1}, V{0}, V{}), InternalError);            // rank 0, a mode
  EXPECT_THROW(RegisterLayout(V64{int64_t(1) << 40, int64_t(1) << 40}, V64{int64_t(1) << 40, int64_t(1) << 40},
                              V{}, V{0, 1}),
               InternalError);  // too many elements
  EXPECT_THROW(replicated(0), InternalError);
  EXPECT_THROW(local({0}), InternalError);
  EXPECT_THROW(spatial({-2}), InternalError);
  EXPECT_THROW(RegisterLayout().map(0, 0), InternalError);
  EXPECT_THROW(RegisterLayout() * local({2}), InternalError);
  // Well-formed raw layouts: unit modes anywhere, replicated axes between modes.
  RegisterLayout ok(V64{2, 1, 3}, V64{2, 1, 1, 3}, V{0, -2, 2}, V{1, 3});
  EXPECT_EQ(ok, spatial({2, 1, 1}) * replicated(2) * spatial({1, 1, 1}) * local({1, 1, 3}));
  try {
    RegisterLayout(V64{4}, V64{4}, V{0}, V{0});
    FAIL();
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("mode 0 appears 2 times"), std::string::npos) << e.what();
  }
}

// --- swizzles and shared layouts ---------------------------------------------------------

TEST(Swizzle, Bijection) {
  Swizzle s{3, 3, 3};
  std::vector<int64_t> out;
  for (int64_t o = 0; o < 1024; ++o) {
    out.push_back(s.apply(o));
    EXPECT_EQ(s.apply(s.apply(o)), o);  // an involution
    EXPECT_EQ(s.apply(o) & 7, o & 7);   // 16-byte vectors of f16 stay whole
  }
  std::sort(out.begin(), out.end());
  std::vector<int64_t> want(1024);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(out, want);
  EXPECT_EQ(Swizzle{}.apply(int64_t(12345)), 12345);
  EXPECT_EQ(s.apply(int64_t(64 + 8)), 64 + 0);  // row 1, chunk 1 -> chunk 0
}

TEST(Swizzle, BankConflictFree) {
  // A [8, 64] f16 tile, rows of 128 bytes = 8 chunks of 16 bytes. Reading chunk column c of
  // all 8 rows (as ldmatrix does) must touch 8 distinct chunk positions, i.e. all 32 banks.
  SharedLayout l({8, 64}, {64, 1}, Swizzle{3, 3, 3});
  for (int64_t c = 0; c < 8; ++c) {
    std::set<int64_t> chunks;
    for (int64_t r = 0; r < 8; ++r) {
      int64_t off = l.offset(Index{r, c * 8});
      EXPECT_EQ(off / 64, r);  // stays in its row
      chunks.insert((off % 64) / 8);
    }
    EXPECT_EQ(chunks.size(), 8u);
  }
  // Without the swizzle every row hits the same chunk position.
  SharedLayout plain = SharedLayout::row_major({8, 64});
  std::set<int64_t> chunks;
  for (int64_t r = 0; r < 8; ++r) chunks.insert((plain.offset(Index{r, 8}) % 64) / 8);
  EXPECT_EQ(chunks.size(), 1u);
}

TEST(Swizzle, ExprMatchesInt) {
  std::mt19937 rng(12);
  Var x("x", dtypes::int32);
  EXPECT_TRUE(Swizzle{}.apply(Expr(x)).same_as(x));
  for (int it = 0; it < 200; ++it) {
    Swizzle s{int(pick(rng, 1, 3)), int(pick(rng, 0, 4)), int(pick(rng, 1, 4))};
    Expr e = s.apply(Expr(x));
    for (int k = 0; k < 20; ++k) {
      int64_t o = pick(rng, 0, 1 << 16);
      EXPECT_EQ(eval_with(e, x, o), s.apply(o));
    }
    EXPECT_TRUE(s.apply(int_const(77)).is_int_const(s.apply(int64_t(77))));
  }
}

TEST(SharedLayout, OffsetsAndStorage) {
  SharedLayout r = SharedLayout::row_major({64, 32});
  EXPECT_EQ(r.strides(), (std::vector<int64_t>{32, 1}));
  EXPECT_EQ(r.offset(Index{3, 5}), 3 * 32 + 5);
  EXPECT_EQ(r.storage_elements(), 2048);
  SharedLayout c = SharedLayout::column_major({64, 32});
  EXPECT_EQ(c.strides(), (std::vector<int64_t>{1, 64}));
  EXPECT_EQ(c.offset(Index{3, 5}), 3 + 5 * 64);
  EXPECT_EQ(c.storage_elements(), 2048);
  EXPECT_EQ(SharedLayout::row_major({2, 3, 4}).strides(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(SharedLayout::column_major({2, 3, 4}).strides(), (std::vector<int64_t>{1, 2, 6}));
  EXPECT_EQ(SharedLayout({4, 4}, {8, 1}).storage_elements(), 28);  // padded rows
  EXPECT_EQ(SharedLayout({}, {}).storage_elements(), 1);
  // Swizzled: rounded up to the period 2^(bits + base + shift).
  EXPECT_EQ(SharedLayout({8, 64}, {64, 1}, Swizzle{3, 3, 3}).storage_elements(), 512);
  EXPECT_EQ(SharedLayout({3, 64}, {64, 1}, Swizzle{3, 3, 3}).storage_elements(), 512);
  EXPECT_EQ(SharedLayout({9, 64}, {64, 1}, Swizzle{3, 3, 3}).storage_elements(), 1024);
  // Every swizzled offset lies inside the storage.
  SharedLayout s({5, 64}, {64, 1}, Swizzle{3, 3, 3});
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 64; ++j) EXPECT_LT(s.offset(Index{i, j}), s.storage_elements());
}

TEST(SharedLayout, ExprOffsets) {
  std::mt19937 rng(13);
  Var i("i", dtypes::int32), j("j", dtypes::int32);
  SharedLayout l({16, 64}, {64, 1}, Swizzle{3, 3, 3});
  Expr e = l.offset(std::vector<Expr>{i, j});
  for (int it = 0; it < 200; ++it) {
    int64_t a = pick(rng, 0, 15), b = pick(rng, 0, 63);
    auto r = evaluate(e, [&](const Var& v) -> std::optional<EvalValue> {
      if (v.same_as(i)) return EvalValue{dtypes::int32, a, 0.0};
      if (v.same_as(j)) return EvalValue{dtypes::int32, b, 0.0};
      return std::nullopt;
    });
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->i, l.offset(Index{a, b}));
  }
  // Constant indices fold; unit strides add no multiplication.
  EXPECT_TRUE(SharedLayout::row_major({4, 8}).offset(std::vector<Expr>{int_const(2), int_const(3)}).is_int_const(19));
  EXPECT_EQ(to_string(SharedLayout::row_major({4, 8}).offset(std::vector<Expr>{i, j})), to_string(i * 8 + j));
  EXPECT_THROW(l.offset(std::vector<Expr>{i}), InternalError);
  EXPECT_THROW(l.offset(std::vector<int64_t>{1}), InternalError);
}

TEST(SharedLayout, DropLeadingEqualityStr) {
  SharedLayout l = SharedLayout::row_major({4, 64, 32});
  EXPECT_EQ(l.drop_leading(1), SharedLayout::row_major({64, 32}));
  EXPECT_EQ(l.drop_leading(0), l);
  EXPECT_EQ(l.drop_leading(3), SharedLayout({}, {}));
  SharedLayout s({2, 8, 64}, {512, 64, 1}, Swizzle{3, 3, 3});
  SharedLayout d = s.drop_leading(1);
  EXPECT_EQ(d.shape(), (std::vector<int64_t>{8, 64}));
  EXPECT_EQ(d.strides(), (std::vector<int64_t>{64, 1}));
  EXPECT_EQ(d.swizzle(), (Swizzle{3, 3, 3}));
  EXPECT_EQ(s.offset(Index{1, 3, 17}), 512 + d.offset(Index{3, 17}));  // period-aligned slice
  EXPECT_THROW(l.drop_leading(4), InternalError);
  EXPECT_THROW(l.drop_leading(-1), InternalError);

  EXPECT_FALSE(SharedLayout::row_major({4, 4}) == SharedLayout::column_major({4, 4}));
  EXPECT_FALSE(s == SharedLayout({2, 8, 64}, {512, 64, 1}));
  // Swizzles without bits are all the identity.
  EXPECT_TRUE(SharedLayout({4}, {1}, Swizzle{0, 3, 3}) == SharedLayout({4}, {1}));

  EXPECT_EQ(SharedLayout::row_major({64, 32}).str(), "shared_layout(shape=[64, 32], strides=[32, 1])");
  EXPECT_EQ(SharedLayout({64, 32}, {32, 1}, Swizzle{3, 3, 3}).str(),
            "shared_layout(shape=[64, 32], strides=[32, 1], swizzle=(3, 3, 3))");
  EXPECT_EQ(SharedLayout({64, 32}, {32, 1}, Swizzle{2, 4, 3}).str(),
            "shared_layout(shape=[64, 32], strides=[32, 1], swizzle=(2, 4, 3))");
  EXPECT_EQ(SharedLayout().str(), "shared_layout(undefined)");
}

TEST(SharedLayout, Injectivity) {
  EXPECT_TRUE(SharedLayout::row_major({64, 32}).is_injective());
  EXPECT_TRUE(SharedLayout::column_major({3, 5, 7}).is_injective());
  EXPECT_TRUE(SharedLayout({8, 64}, {64, 1}, Swizzle{3, 3, 3}).is_injective());
  EXPECT_FALSE(SharedLayout({4, 8}, {0, 1}).is_injective());  // broadcast dim
  EXPECT_TRUE(SharedLayout({1, 8}, {0, 1}).is_injective());   // a unit dim may have stride 0
  EXPECT_FALSE(SharedLayout({4, 8}, {4, 1}).is_injective());  // overlapping rows
  EXPECT_TRUE(SharedLayout({2, 2}, {3, 2}).is_injective());   // offsets 0, 2, 3, 5
  EXPECT_FALSE(SharedLayout({8, 64}, {64, 1}, Swizzle{3, 3, 0}).is_injective());  // zeroes bits
  // Too large to enumerate.
  EXPECT_TRUE(SharedLayout::row_major({2048, 1024}).is_injective());
  EXPECT_TRUE(SharedLayout({2048, 1024}, {1024, 1}, Swizzle{3, 3, 3}).is_injective());
  EXPECT_FALSE(SharedLayout({2048, 1024}, {0, 1}).is_injective());
  EXPECT_FALSE(SharedLayout({2048, 1024}, {512, 1}).is_injective());
}

TEST(SharedLayout, MalformedThrows) {
  EXPECT_THROW(SharedLayout({4, 4}, {1}), InternalError);
  EXPECT_THROW(SharedLayout({4, 4}, {4, -1}), InternalError);
  EXPECT_THROW(SharedLayout({0, 4}, {4, 1}), InternalError);
  EXPECT_THROW(SharedLayout({4}, {1}, Swizzle{-1, 3, 3}), InternalError);
  EXPECT_THROW(SharedLayout().offset(std::vector<int64_t>{}), InternalError);
}

}  // namespace
}  // namespace tilus
