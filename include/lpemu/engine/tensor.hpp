// Engine tensors: row-major Eigen matrices laid out [tokens, features].
// Weights are [out_features, in_features], so a linear layer computes Y = X · Wᵀ.
#pragma once

#include <Eigen/Core>

namespace lpemu::engine {

/// A row-major matrix of scalar T: [tokens, features] for activations, [out, in] for weights.
template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
/// A column vector of scalar T (norm weights, biases).
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

/// The engine's float32 tensor.
using RowMatrix = Mat<float>;
/// The engine's float64 tensor (fp64 reference runs).
using RowMatrixD = Mat<double>;

}  // namespace lpemu::engine
