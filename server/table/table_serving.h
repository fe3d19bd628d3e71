// Serving a sparse table's buckets (docs/tables.md): PUSH (keys and rows in one frame; applied
// row by row, or held for a synchronous round) and PULL (keys in; rows out), on the bucket's
// owning thread, with the dense partitions' exactly-once numbering and consistency gate.
//
// Tables are defined under the controllers that apply pushes on arrival (asp, ssp, dssp) or
// hold them for lockstep rounds (bsp), with the plain sum aggregator: the row-wise rule is the
// table's optimizer. Every other combination is refused per request, with its reason.
#pragma once

#include "common/registry.h"
#include "common/status.h"
#include "server/serving.h"

namespace hetps {

// Why tables are not defined under this controller and aggregator (both validated), or OK.
Status TablesDefinedUnder(const AlgorithmSpec& consistency, const AlgorithmSpec& aggregator);
// The controllers tables are defined under (from the controller registry).
std::vector<std::string> TableControllers();

// Adds each table's figures over the buckets `store` holds to `report`. REQUIRES: the calling
// thread owns those buckets (the network thread: a bucket has no values of its own to apply).
void ReportTables(const ShardMap& map, PartitionStore& store, proto::ServerReport& report);

// Checks a table request's shape before the gate sees it (network thread).
Status CheckTableRequest(const proto::Header& h, const Message& m, const TensorSpec& table);

// Serves one PUSH or PULL of a table bucket; `reply` is called once. REQUIRES: the calling
// thread owns `part`, a table bucket, and CheckTableRequest passed.
void ServeTable(const ServingState& shared, DataRequest& req, PartitionState& part,
                const ReplyFn& reply);

}  // namespace hetps
