// Communication under compute slows the compute (models/sm_share.hpp), by hand.
#include "models/sm_share.hpp"

#include <gtest/gtest.h>

namespace meshwork::models {
namespace {

TEST(SmShare, ComputeRunsOnTheSmsACollectiveLeavesWhileItRuns) {
  // 10 s of work beside a collective holding a quarter of the SMs for its first 4 s: 3 s of
  // work done in those 4, the other 7 at full speed.
  EXPECT_DOUBLE_EQ(slowed_compute_s(10, 4, 0.25), 11);
  // Done inside the collective: 2 s of work at 3/4 of the speed.
  EXPECT_DOUBLE_EQ(slowed_compute_s(2, 4, 0.25), 2 / 0.75);
  EXPECT_DOUBLE_EQ(slowed_compute_s(10, 4, 0), 10);     // copy-engine transfers take nothing
  // No more than NCCL's 64 channels of A100's 108 SMs: 4 s at 44/108 of the speed, then the rest.
  EXPECT_DOUBLE_EQ(slowed_compute_s(10, 4, 1), 4 + (10 - 4 * 44.0 / 108));
  EXPECT_DOUBLE_EQ(slowed_compute_s(0, 4, 0.25), 0);
}

TEST(SmShare, ASplitTpCollectiveExposesWhatTheSlowedGemmDoesNotCover) {
  // A 3 s reduce-scatter under a 10 s GEMM that loses a quarter of the SMs while it runs: the
  // GEMM ends at 3 + (10 - 2.25) = 10.75 s, 0.75 s exposed (none without the SM share).
  EXPECT_DOUBLE_EQ(tp_exposed_s(3, 10, 0.25), 0.75);
  EXPECT_DOUBLE_EQ(tp_exposed_s(3, 10, 0), 0);
  // A 12 s collective over a 6 s GEMM: the GEMM, slowed to 8 s, ends first; 6 s exposed.
  EXPECT_DOUBLE_EQ(tp_exposed_s(12, 6, 0.25), 6);
}

// Other work beside a stream's collectives, from any start (a pipeline transfer sharing its
// NIC with them: models/pipeline), by hand.
TEST(SmShare, WorkFromAnyStartBesideTheStreamsSpans) {
  SharedSms sms(0.25);
  sms.busy(2, 4);
  sms.busy(6, 8);
  // 1 s from 1: 1 s at full speed to 2... done at 2.
  EXPECT_DOUBLE_EQ(sms.run_at(1, 1, 0.5), 2);
  // 2 s from 1: 1 s to 2, then 1 s of work at half speed inside [2, 4): done at 4.
  EXPECT_DOUBLE_EQ(sms.run_at(1, 2, 0.5), 4);
  // 3 s from 3: 0.5 s of work in [3, 4), 2 s to 6, the last 0.5 s at half speed: 7.
  EXPECT_DOUBLE_EQ(sms.run_at(3, 3, 0.5), 7);
  // From between the spans: 1 s to 6, the last 1 s at half speed inside [6, 8): 8.
  EXPECT_DOUBLE_EQ(sms.run_at(5, 2, 0.5), 8);
  // A fraction past the SMs' bound (kMostSmsHeld) is not held to it: 0.5 s of work in [6, 8).
  EXPECT_DOUBLE_EQ(sms.run_at(6, 1, 0.75), 8 + 0.5);
  // After a later start was asked, an earlier one still sees the spans before it.
  EXPECT_DOUBLE_EQ(sms.run_at(0, 3, 0.5), 4);
  EXPECT_DOUBLE_EQ(sms.run_at(9, 1, 0.5), 10);
  EXPECT_DOUBLE_EQ(sms.run_at(3, 1, 0), 4);
  // run itself keeps its own fraction.
  EXPECT_DOUBLE_EQ(sms.run(3, 0.75), 4);
}

TEST(SmShare, ComputeBesideAStreamOfCollectives) {
  plan::GpuSpec h100;
  h100.name = "h100-sxm";
  const HardwareProfile hopper = hardware_profile(h100);
  EXPECT_DOUBLE_EQ(sm_fraction(hopper, Stream::dp, Collective::reduce_scatter, false), 16.0 / 132);
  // Transformer Engine's ring exchange rides the copy engine; its reduce-scatter holds SMs.
  EXPECT_DOUBLE_EQ(sm_fraction(hopper, Stream::tp, Collective::all_gather, true), 0);
  EXPECT_DOUBLE_EQ(sm_fraction(hopper, Stream::tp, Collective::reduce_scatter, true), 16.0 / 132);
  plan::GpuSpec measured = h100;
  measured.calibration.collective_sm_fraction = 0;
  EXPECT_DOUBLE_EQ(sm_fraction(hardware_profile(measured), Stream::dp, Collective::all_reduce, false), 0);
  // A library setting, not a measurement: the profile stays the generation's.
  EXPECT_EQ(hardware_profile(measured).generation, "hopper");

  // Collectives over [1, 3) and [5, 6), each holding half the SMs.
  SharedSms sms(0.5);
  sms.busy(1, 3);
  sms.busy(5, 6);
  // 4 s of work from 0: 1 s alone, 1 s of work in the 2 s beside the first, 2 s alone: at 5.
  EXPECT_DOUBLE_EQ(sms.run(0, 4), 5);
  // 1 s from 5: half of it by 6, the rest alone.
  EXPECT_DOUBLE_EQ(sms.run(5, 1), 6.5);
  EXPECT_DOUBLE_EQ(sms.run(7, 1), 8);
  SharedSms none(0);
  none.busy(0, 10);
  EXPECT_DOUBLE_EQ(none.run(0, 4), 4);
}

}  // namespace
}  // namespace meshwork::models
