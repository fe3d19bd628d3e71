// The layer-wise push schedules (scheduler/layer_schedule/) and the scheduler's LayerPlanner:
// each policy's periods, the planner's measure of the workers' reports, what it hands the
// workers, and what /api/status, /metrics and `hetps status` show of it.
#include "scheduler/layer_schedule/layer_schedule.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/status.h"
#include "scheduler/cluster_stats.h"
#include "scheduler/layer_planner.h"

namespace hetps {
namespace {

// Past the warm-up unless told: clock 1000, the loss halved.
std::vector<int32_t> Periods(const std::string& spec, const std::vector<LayerFigures>& layers,
                             int64_t clock = 1000, double loss_ratio = 0.5) {
  auto policy = MakeLayerSchedule(spec);
  EXPECT_TRUE(policy.ok()) << policy.status().ToString();
  return (*policy)->Periods(layers, {.clock = clock, .loss_ratio = loss_ratio});
}

std::vector<LayerFigures> Measured(const std::vector<double>& relative) {
  std::vector<LayerFigures> layers;
  for (double r : relative) layers.push_back({.elements = 100, .relative_gradient = r});
  return layers;
}

TEST(LayerScheduleTest, EveryPushesEachLayerEachStep) {
  EXPECT_EQ(Periods("every", Measured({0.1, 0.001, -1})), (std::vector<int32_t>{1, 1, 1}));
  EXPECT_FALSE((*MakeLayerSchedule("every"))->mean());
}

TEST(LayerScheduleTest, FixedSplitsShallowFromDeep) {
  // auto: the upper half of the layers is deep (of 5: layers 3 and 4; of 4: 2 and 3).
  EXPECT_EQ(Periods("fixed:deep=4", Measured({1, 1, 1, 1, 1})),
            (std::vector<int32_t>{1, 1, 1, 4, 4}));
  EXPECT_EQ(Periods("fixed:deep=4", Measured({1, 1, 1, 1})), (std::vector<int32_t>{1, 1, 4, 4}));
  EXPECT_EQ(Periods("fixed:shallow=2,deep=6,deep_from=1", Measured({1, 1, 1})),
            (std::vector<int32_t>{2, 6, 6}));
  EXPECT_EQ(Periods("fixed:deep_from=9", Measured({1, 1})), (std::vector<int32_t>{1, 1}));
  EXPECT_TRUE((*MakeLayerSchedule("fixed:combine=mean"))->mean());
  EXPECT_FALSE((*MakeLayerSchedule("fixed"))->mean());
}

TEST(LayerScheduleTest, AdaptiveGivesSlowLayersPowerOfTwoPeriodsWithinBounds) {
  // Against the fastest layer (0.16): ratios 1, 1.6, 5.3, 10.7, 160 (each 25% past its power of
  // two: a period rises only then, see below).
  EXPECT_EQ(Periods("adaptive", Measured({0.16, 0.1, 0.03, 0.015, 0.001})),
            (std::vector<int32_t>{1, 1, 4, 8, 8}));
  EXPECT_EQ(Periods("adaptive:min=2,max=4", Measured({0.16, 0.1, 0.03, 0.015})),
            (std::vector<int32_t>{2, 2, 4, 4}));
  // Unmeasured layers go every `min` steps; with nothing measured, every layer does.
  EXPECT_EQ(Periods("adaptive", Measured({0.2, -1, 0.04})), (std::vector<int32_t>{1, 1, 4}));
  EXPECT_EQ(Periods("adaptive:min=3", Measured({-1, -1})), (std::vector<int32_t>{3, 3}));
  // A layer whose gradient vanished waits the longest.
  EXPECT_EQ(Periods("adaptive:max=16", Measured({0.2, 0})), (std::vector<int32_t>{1, 16}));
  // Before the warm-up's clock, or while the loss has not fallen by loss_drop (a network on its
  // initial plateau), every layer goes every `min` steps.
  EXPECT_EQ(Periods("adaptive", Measured({0.16, 0.001}), 99), (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(Periods("adaptive", Measured({0.16, 0.001}), 5000, 0.95), (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(Periods("adaptive:loss_drop=0", Measured({0.16, 0.001}), 100, 1.0),
            (std::vector<int32_t>{1, 8}));
  EXPECT_EQ(Periods("adaptive:warmup=0,min=2", Measured({0.16, 0.001}), 0),
            (std::vector<int32_t>{2, 8}));
}

TEST(LayerScheduleTest, AdaptiveKeepsAPeriodUntilTheRatioIsClearlyPastABoundary) {
  auto policy = std::move(*MakeLayerSchedule("adaptive:warmup=0,max=8"));
  auto period = [&](double r) {
    return policy->Periods(Measured({1.0, r}), {.loss_ratio = 0.5})[1];
  };
  EXPECT_EQ(period(1 / 5.0), 4);   // ratio 5: 4 (past 4 by 25%)
  EXPECT_EQ(period(1 / 8.5), 4);   // ratio 8.5: not 25% past 8 yet
  EXPECT_EQ(period(1 / 10.5), 8);  // ratio 10.5: it is
  EXPECT_EQ(period(1 / 7.0), 8);   // back to 7: within 20% of 8, kept
  EXPECT_EQ(period(1 / 6.0), 4);   // 6: clearly below
  EXPECT_EQ(period(1 / 2.2), 2);
  EXPECT_EQ(period(1.0), 1);
}

TEST(LayerScheduleTest, RefusesWhatItCannotDo) {
  EXPECT_FALSE(MakeLayerSchedule("fixed:deep=0").ok());
  EXPECT_FALSE(MakeLayerSchedule("fixed:combine=max").ok());
  EXPECT_FALSE(MakeLayerSchedule("every:deep=2").ok());
  EXPECT_FALSE(MakeLayerSchedule("adaptive:min=0").ok());
  EXPECT_FALSE(MakeLayerSchedule("often").ok());
  LayerPlanner planner;
  EXPECT_FALSE(planner.Set("fixed:deep=-1").ok());
  EXPECT_EQ(planner.spec(), "every") << "a refused spec changes nothing";
}

proto::ShardMap ThreeLayers() {
  proto::ShardMap map;
  const std::vector<std::pair<int, int64_t>> shapes = {{0, 100}, {0, 10}, {1, 50}, {2, 8}};
  for (const auto& [layer, n] : shapes) {
    proto::TensorSpec* t = map.add_tensors();
    t->set_layer(layer);
    t->add_shape(n);
  }
  return map;
}

proto::WorkerReport Report(const std::vector<std::tuple<int, int64_t, double, double>>& layers,
                           int64_t deferred) {
  proto::WorkerReport r;
  for (const auto& [layer, steps, grad_sq, weight_sq] : layers) {
    proto::LayerGradient* g = r.add_layers();
    g->set_layer(layer);
    g->set_steps(steps);
    g->set_grad_norm_sq(grad_sq);
    g->set_weight_norm_sq(weight_sq);
    g->set_deferred_bytes(deferred);
  }
  return r;
}

TEST(LayerPlannerTest, MeasuresTheWorkersAndHandsThemThePeriods) {
  LayerPlanner planner;
  ASSERT_TRUE(planner.Set("adaptive:max=8").ok());
  EXPECT_EQ(planner.spec(), "adaptive:combine=sum,loss_drop=0.1,max=8,min=1,warmup=100");
  planner.SetShape(ThreeLayers());
  EXPECT_EQ(planner.Hint().periods_size(), 3);
  // Layer 0: 4 steps of ||g||^2 = 0.04 against ||w||^2 = 1: r = 0.2. Layer 1: r = 0.04.
  // Layer 2: r = 0.02. Unknown layers and garbage figures are ignored.
  planner.OnWorkerReport(
      5, Report({{0, 4, 0.16, 1.0}, {1, 2, 0.0032, 1.0}, {2, 1, 0.0004, 1.0}, {7, 1, 1, 1}}, 64));
  planner.OnWorkerReport(6, Report({{1, 0, 0, 0}, {2, 3, -1, 1}}, 36));
  EXPECT_FALSE(planner.Update(50)) << "warming up: every layer every step";
  EXPECT_FALSE(planner.Update(200)) << "no loss reported yet";
  proto::WorkerReport losses;
  for (double loss : {2.3, 1.0, 1.0, 1.0}) {  // the EWMA falls below 0.9 x 2.3 at the second
    proto::MetricPoint* p = losses.add_metrics();
    (*p->mutable_values())["loss"] = loss;
  }
  planner.OnWorkerReport(5, losses);
  EXPECT_TRUE(planner.Update(200));
  EXPECT_FALSE(planner.Update(220)) << "nothing changed";
  const proto::LayerSchedule& hint = planner.Hint();
  EXPECT_EQ(hint.spec(), planner.spec());
  EXPECT_EQ(std::vector<int32_t>(hint.periods().begin(), hint.periods().end()),
            (std::vector<int32_t>{1, 4, 8}));
  EXPECT_FALSE(hint.mean());

  const nlohmann::json j = planner.Json();
  EXPECT_EQ(j["spec"], planner.spec());
  ASSERT_EQ(j["layers"].size(), 3u);
  EXPECT_EQ(j["layers"][0]["elements"], 110);
  EXPECT_NEAR(j["layers"][0]["relative_gradient"].get<double>(), 0.2, 1e-12);
  EXPECT_EQ(j["layers"][2]["period"], 8);
  EXPECT_EQ(j["layers"][1]["deferred_bytes"], 64 + 36);  // both workers' totals
  EXPECT_EQ(j["deferred_bytes"], 64 + 64 + 36 + 64 + 36);

  // A live switch takes effect at once; the figures stay.
  ASSERT_TRUE(planner.Set("fixed:deep=3,deep_from=2,combine=mean").ok());
  EXPECT_EQ(std::vector<int32_t>(planner.Hint().periods().begin(), planner.Hint().periods().end()),
            (std::vector<int32_t>{1, 1, 3}));
  EXPECT_TRUE(planner.Hint().mean());
}

TEST(LayerPlannerTest, StatusMetricsAndTheStatusTableShowTheSchedule) {
  LayerPlanner planner;
  ASSERT_TRUE(planner.Set("fixed:deep=4").ok());
  planner.SetShape(ThreeLayers());
  planner.OnWorkerReport(2, Report({{0, 1, 0.01, 1}, {2, 1, 0.04, 4}}, 4096));
  planner.Update(10);
  ClusterStats stats(1, 1);
  stats.SetLayerPlanner(&planner);
  const nlohmann::json status = nlohmann::json::parse(stats.StatusJson(1));
  EXPECT_EQ(status["layer_schedule"]["spec"], "fixed:combine=sum,deep=4,deep_from=auto,shallow=1");
  EXPECT_EQ(status["layer_schedule"]["layers"][2]["period"], 4);
  const std::string metrics = stats.Metrics(1);
  EXPECT_NE(metrics.find("hetps_layer_push_period{layer=\"2\"} 4"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("hetps_layer_deferred_bytes_total{layer=\"2\"} 4096"), std::string::npos);
  EXPECT_NE(metrics.find("hetps_layer_relative_gradient{layer=\"0\"} 0.1"), std::string::npos);
  auto text = RenderStatus(stats.StatusJson(1));
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_NE(text->find("layer schedule fixed:combine=sum,deep=4,deep_from=auto,shallow=1: 8.0 KiB "
                       "saved"),
            std::string::npos)
      << *text;
  EXPECT_NE(text->find("PERIOD"), std::string::npos) << *text;
  // Layer 2: no server figures yet, period 4, r = 0.1, 4 KiB saved.
  EXPECT_NE(text->find("    2          -          -            -          -         -      4   "
                       "0.1000    4.0 KiB"),
            std::string::npos)
      << *text;
}

}  // namespace
}  // namespace hetps
