// powersgd (rank r, seed; error feedback on by default): a partition of whole rows of a
// matrix-shaped tensor, M (rows x cols), travels as P (rows x r, orthonormalised M Q) and
// Q' = M^T P (cols x r); it decodes to P Q'^T and Q' is the next step's Q (warm start).
// Partitions that are not whole rows, 1-D tensors, and matrices where the factors would not be
// smaller travel raw. Wire: uint32 rows, cols, r (all 0 when raw), then P and Q', or n floats.
#include <Eigen/Dense>
#include <cmath>
#include <cstring>

#include "common/compress/codecs.h"
#include "common/compress/util.h"

namespace hetps::compress {
namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct PowerSgdState : CodecState {
  Matrix q;  // cols x r, from the last step
};

struct Shape {
  int64_t rows = 0, cols = 0, rank = 0;  // rank 0: raw
};

class PowerSgd : public Codec {
 public:
  explicit PowerSgd(const CodecSpec& spec)
      : Codec(spec),
        rank_(static_cast<int64_t>(Param("rank"))),
        seed_(static_cast<uint64_t>(Param("seed"))) {}

  std::unique_ptr<CodecState> NewState(int64_t) const override {
    return std::make_unique<PowerSgdState>();
  }

  Shape ShapeOf(int64_t n, const CodecContext& ctx) const {
    Shape s;
    if (ctx.cols <= 1 || n % ctx.cols != 0 || n / ctx.cols <= 1) return s;
    s.cols = ctx.cols;
    s.rows = n / ctx.cols;
    s.rank = std::min({rank_, s.rows, s.cols});
    if (s.rank * (s.rows + s.cols) >= n) return Shape();
    return s;
  }

  int64_t EncodedBytes(int64_t n, const CodecContext& ctx) const override {
    const Shape s = ShapeOf(n, ctx);
    return 12 + 4 * (s.rank ? s.rank * (s.rows + s.cols) : n);
  }

  void Encode(const float* x, int64_t n, const CodecContext& ctx, CodecState* state,
              std::vector<uint8_t>& out) const override {
    const Shape s = ShapeOf(n, ctx);
    const uint32_t header[3] = {static_cast<uint32_t>(s.rows), static_cast<uint32_t>(s.cols),
                                static_cast<uint32_t>(s.rank)};
    out.resize(EncodedBytes(n, ctx));
    std::memcpy(out.data(), header, 12);
    if (s.rank == 0) {
      std::memcpy(out.data() + 12, x, 4 * n);
      return;
    }
    PowerSgdState fresh;
    auto& st = state ? static_cast<PowerSgdState&>(*state) : fresh;
    if (st.q.rows() != s.cols || st.q.cols() != s.rank) {
      st.q.resize(s.cols, s.rank);
      const RngKey key{seed_, ctx.key.partition, 0};
      for (int64_t i = 0; i < st.q.size(); ++i) {
        st.q.data()[i] = Uniform(key, static_cast<uint64_t>(i)) - 0.5f;
      }
    }
    Eigen::Map<const Matrix> m(x, s.rows, s.cols);
    Matrix p = m * st.q;
    for (int64_t c = 0; c < s.rank; ++c) {  // Gram-Schmidt, twice for stability
      for (int pass = 0; pass < 2; ++pass) {
        for (int64_t prev = 0; prev < c; ++prev) {
          p.col(c) -= p.col(prev).dot(p.col(c)) * p.col(prev);
        }
      }
      const float norm = p.col(c).norm();
      if (norm > 1e-12f) {
        p.col(c) /= norm;
      } else {
        p.col(c).setZero();
      }
    }
    st.q = m.transpose() * p;
    std::memcpy(out.data() + 12, p.data(), 4 * p.size());
    std::memcpy(out.data() + 12 + 4 * p.size(), st.q.data(), 4 * st.q.size());
  }

  Status Decode(const uint8_t* data, size_t size, int64_t n, const CodecContext&,
                float* out) const override {
    if (size < 12) return SizeError(size, 12, n);
    const int64_t rows = Load<uint32_t>(data), cols = Load<uint32_t>(data + 4),
                  rank = Load<uint32_t>(data + 8);
    if (rows == 0 && cols == 0 && rank == 0) {
      if (size != static_cast<size_t>(12 + 4 * n)) return SizeError(size, 12 + 4 * n, n);
      std::memcpy(out, data + 12, 4 * n);
      return Status();
    }
    if (rows < 1 || cols < 1 || rows > n || cols > n || rows * cols != n || rank < 1 ||
        rank > std::min(rows, cols)) {
      return Status::Malformed(
          fmt::format("powersgd: a {} x {} rank-{} factorisation does not fit {} elements", rows,
                      cols, rank, n));
    }
    const int64_t want = 12 + 4 * rank * (rows + cols);
    if (size != static_cast<size_t>(want)) return SizeError(size, want, n);
    Matrix p(rows, rank), q(cols, rank);
    std::memcpy(p.data(), data + 12, 4 * p.size());
    std::memcpy(q.data(), data + 12 + 4 * p.size(), 4 * q.size());
    if (!p.allFinite() || !q.allFinite()) return Status::Malformed("powersgd: non-finite factors");
    Eigen::Map<Matrix>(out, rows, cols).noalias() = p * q.transpose();
    return Status();
  }

 private:
  int64_t rank_;
  uint64_t seed_;
};

}  // namespace

void RegisterPowerSgd(CodecRegistry& r) {
  r.Add({"powersgd",
         "PowerSGD: rank-r factors P, Q of whole-row matrix partitions",
         {ParamDef::Int("rank", "2", 1, 1024, "rank r"), Seed(), EfParam(true)}},
        {[](const CodecSpec& spec) { return std::make_unique<PowerSgd>(spec); }});
}

}  // namespace hetps::compress
