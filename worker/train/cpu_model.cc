// The CPU model: dense products on Eigen, convolutions as im2col + one product per sample,
// samples spread over OpenMP threads (each with its own gradient accumulators).
#include <omp.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

#include "worker/train/model.h"
#include "worker/train/softmax.h"

namespace hetps {
namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<Matrix>;
using ConstMatrixMap = Eigen::Map<const Matrix>;
using VectorMap = Eigen::Map<Eigen::VectorXf>;
using ConstVectorMap = Eigen::Map<const Eigen::VectorXf>;
using Kind = LayerSpec::Kind;

// col (c*k*k rows, oh*ow columns) of one c x h x w image; zero outside it.
void Im2Col(const float* in, const Shape& s, int k, int pad, const Shape& o, float* col) {
  for (int c = 0; c < s.c; ++c) {
    for (int ky = 0; ky < k; ++ky) {
      for (int kx = 0; kx < k; ++kx) {
        float* row = col + static_cast<int64_t>((c * k + ky) * k + kx) * o.h * o.w;
        for (int oy = 0; oy < o.h; ++oy) {
          const int iy = oy - pad + ky;
          for (int ox = 0; ox < o.w; ++ox) {
            const int ix = ox - pad + kx;
            row[oy * o.w + ox] = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w
                                     ? in[(static_cast<int64_t>(c) * s.h + iy) * s.w + ix]
                                     : 0.0f;
          }
        }
      }
    }
  }
}

// The adjoint of Im2Col: sums each column entry back into the pixel it was copied from.
void Col2Im(const float* col, const Shape& s, int k, int pad, const Shape& o, float* in) {
  std::fill_n(in, s.size(), 0.0f);
  for (int c = 0; c < s.c; ++c) {
    for (int ky = 0; ky < k; ++ky) {
      for (int kx = 0; kx < k; ++kx) {
        const float* row = col + static_cast<int64_t>((c * k + ky) * k + kx) * o.h * o.w;
        for (int oy = 0; oy < o.h; ++oy) {
          const int iy = oy - pad + ky;
          if (iy < 0 || iy >= s.h) continue;
          for (int ox = 0; ox < o.w; ++ox) {
            const int ix = ox - pad + kx;
            if (ix >= 0 && ix < s.w) {
              in[(static_cast<int64_t>(c) * s.h + iy) * s.w + ix] += row[oy * o.w + ox];
            }
          }
        }
      }
    }
  }
}

class CpuModel : public Model {
 public:
  explicit CpuModel(Architecture a) : Model(std::move(a)) {}

  std::string device() const override { return "cpu"; }

  StatusOr<double> LossAndGradients(const Params& params, const float* x, const int32_t* y,
                                    int64_t batch, Params& grads) override {
    Forward(params, x, batch);
    const Architecture& a = arch();
    Matrix delta(batch, a.classes);
    const double loss = SoftmaxCrossEntropy(act_.back().data(), y, batch, a.classes, delta.data());
    for (size_t i = a.layers.size(); i-- > 0;) {
      Backward(params, i, batch, delta, grads, /*input_grad=*/i > 0);
    }
    return loss;
  }

  Status Predict(const Params& params, const float* x, int64_t n, int32_t* out) override {
    constexpr int64_t kChunk = 1024;
    const int classes = arch().classes;
    for (int64_t begin = 0; begin < n; begin += kChunk) {
      const int64_t rows = std::min(kChunk, n - begin);
      Forward(params, x + begin * arch().input.size(), rows);
      const Matrix& logits = act_.back();
      for (int64_t i = 0; i < rows; ++i) {
        const float* r = logits.data() + i * classes;
        out[begin + i] = static_cast<int32_t>(std::max_element(r, r + classes) - r);
      }
    }
    return Status();
  }

 private:
  // act_[i] = input of layer i (batch x shapes[i].size()), act_.back() the logits.
  void Forward(const Params& params, const float* x, int64_t batch) {
    const Architecture& a = arch();
    act_.resize(a.layers.size() + 1);
    argmax_.resize(a.layers.size());
    act_[0] = ConstMatrixMap(x, batch, a.input.size());
    for (size_t i = 0; i < a.layers.size(); ++i) {
      const LayerSpec& l = a.layers[i];
      const Shape& s = a.shapes[i];
      const Shape& o = a.shapes[i + 1];
      const Matrix& in = act_[i];
      Matrix& out = act_[i + 1];
      out.resize(batch, o.size());
      const int w = a.weight_tensor[i];
      switch (l.kind) {
        case Kind::kLinear: {
          ConstMatrixMap weight(params[w].data(), o.size(), s.size());
          out.noalias() = in * weight.transpose();
          out.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(params[w + 1].data(), o.size());
          break;
        }
        case Kind::kConv: {
          ConstMatrixMap weight(params[w].data(), o.c, s.c * l.kernel * l.kernel);
          ConstVectorMap bias(params[w + 1].data(), o.c);
#pragma omp parallel
          {
            Matrix col(s.c * l.kernel * l.kernel, o.h * o.w);
#pragma omp for
            for (int64_t n = 0; n < batch; ++n) {
              Im2Col(in.row(n).data(), s, l.kernel, l.pad, o, col.data());
              MatrixMap y(out.row(n).data(), o.c, o.h * o.w);
              y.noalias() = weight * col;
              y.colwise() += bias;
            }
          }
          break;
        }
        case Kind::kRelu:
          out = in.cwiseMax(0.0f);
          break;
        case Kind::kMaxPool: {
          std::vector<int32_t>& arg = argmax_[i];
          arg.resize(batch * o.size());
          const int k = l.kernel;
          for (int64_t n = 0; n < batch; ++n) {
            const float* src = in.row(n).data();
            float* dst = out.row(n).data();
            int32_t* best = arg.data() + n * o.size();
            for (int c = 0; c < o.c; ++c) {
              for (int oy = 0; oy < o.h; ++oy) {
                for (int ox = 0; ox < o.w; ++ox) {
                  int32_t at = (c * s.h + oy * k) * s.w + ox * k;
                  for (int dy = 0; dy < k; ++dy) {
                    for (int dx = 0; dx < k; ++dx) {
                      const int32_t j = (c * s.h + oy * k + dy) * s.w + ox * k + dx;
                      if (src[j] > src[at]) at = j;
                    }
                  }
                  const int64_t out_index = (c * o.h + oy) * o.w + ox;
                  dst[out_index] = src[at];
                  best[out_index] = at;
                }
              }
            }
          }
          break;
        }
      }
    }
  }

  // Turns `delta` (d loss / d output of layer i) into d loss / d input of layer i when
  // input_grad, after adding the layer's parameter gradients to `grads`.
  void Backward(const Params& params, size_t i, int64_t batch, Matrix& delta, Params& grads,
                bool input_grad) {
    const Architecture& a = arch();
    const LayerSpec& l = a.layers[i];
    const Shape& s = a.shapes[i];
    const Shape& o = a.shapes[i + 1];
    const Matrix& in = act_[i];
    const int w = a.weight_tensor[i];
    switch (l.kind) {
      case Kind::kLinear: {
        MatrixMap gw(grads[w].data(), o.size(), s.size());
        gw.noalias() = delta.transpose() * in;
        Eigen::Map<Eigen::RowVectorXf>(grads[w + 1].data(), o.size()) = delta.colwise().sum();
        if (input_grad) {
          ConstMatrixMap weight(params[w].data(), o.size(), s.size());
          Matrix back = delta * weight;
          delta.swap(back);
        }
        break;
      }
      case Kind::kConv: {
        const int64_t ckk = static_cast<int64_t>(s.c) * l.kernel * l.kernel;
        ConstMatrixMap weight(params[w].data(), o.c, ckk);
        MatrixMap gw(grads[w].data(), o.c, ckk);
        VectorMap gb(grads[w + 1].data(), o.c);
        gw.setZero();
        gb.setZero();
        Matrix back;
        if (input_grad) back.resize(batch, s.size());
#pragma omp parallel
        {
          Matrix col(ckk, o.h * o.w), dcol, local_gw = Matrix::Zero(o.c, ckk);
          Eigen::VectorXf local_gb = Eigen::VectorXf::Zero(o.c);
#pragma omp for
          for (int64_t n = 0; n < batch; ++n) {
            Im2Col(in.row(n).data(), s, l.kernel, l.pad, o, col.data());
            ConstMatrixMap dy(delta.row(n).data(), o.c, o.h * o.w);
            local_gw.noalias() += dy * col.transpose();
            local_gb += dy.rowwise().sum();
            if (input_grad) {
              dcol.noalias() = weight.transpose() * dy;
              Col2Im(dcol.data(), s, l.kernel, l.pad, o, back.row(n).data());
            }
          }
#pragma omp critical
          {
            gw += local_gw;
            gb += local_gb;
          }
        }
        if (input_grad) delta.swap(back);
        break;
      }
      case Kind::kRelu:
        if (input_grad)
          delta = delta.cwiseProduct((act_[i + 1].array() > 0.0f).cast<float>().matrix());
        break;
      case Kind::kMaxPool:
        if (input_grad) {
          Matrix back = Matrix::Zero(batch, s.size());
          const std::vector<int32_t>& arg = argmax_[i];
          for (int64_t n = 0; n < batch; ++n) {
            for (int64_t j = 0; j < o.size(); ++j) back(n, arg[n * o.size() + j]) += delta(n, j);
          }
          delta.swap(back);
        }
        break;
    }
  }

  std::vector<Matrix> act_;
  std::vector<std::vector<int32_t>> argmax_;  // per pool layer: the input index of each output
};

}  // namespace

std::unique_ptr<Model> MakeCpuModel(Architecture arch) {
  return std::make_unique<CpuModel>(std::move(arch));
}

void SetComputeThreads(int threads) {
  omp_set_num_threads(std::max(1, threads));
  Eigen::setNbThreads(std::max(1, threads));
}

}  // namespace hetps
