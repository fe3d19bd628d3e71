// What a federated client in Python needs of the scenario's emulation, bound from the C++ edge
// client's own code so that a client of rank r gets the same device, link, availability and data
// partition in either language: hetps.Link (LinkOptions), edge_profile (worker/edge/
// edge_profile.h), Availability (worker/edge/availability.h) and split_samples
// (worker/train/workload.h). hetps.fed's Scenario uses them.
#pragma once

#include <pybind11/pybind11.h>

namespace hetps {

void AddEdge(pybind11::module_& m);

}  // namespace hetps
