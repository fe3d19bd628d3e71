// hetps.LayerAccumulator: the layer-wise push schedule's worker side (hetps/layer_accumulator.h)
// for float32 numpy arrays, bound from the C++ code so that a Python federated client follows
// exactly the rules the C++ trainer and edge clients do. hetps.fed uses it.
#pragma once

#include <pybind11/pybind11.h>

namespace hetps {

void AddLayers(pybind11::module_& m);

}  // namespace hetps
