// How a node chooses between ordinary and streaming stores into the host allreduce's window
// (src/comm/window_store_choice.hpp), without MPI: the chunks' measured times go in, the kind of
// the next chunks comes out.
#include "comm/window_store_choice.hpp"

#include <gtest/gtest.h>

#include <cstdint>

namespace dpl::comm::detail {
namespace {

// Runs `chunks` chunks whose time per byte depends only on the kind of stores, feeding each
// measurement back as the window does (one chunk after its decision); returns how many streamed.
int run_chunks(WindowStoreChoice& choice, int chunks, double cached, double streaming) {
  int streamed = 0;
  bool pending = false, pending_streaming = false;
  for (int i = 0; i < chunks; ++i) {
    const bool s = choice.decide();
    if (pending) choice.record(pending_streaming, pending_streaming ? streaming : cached);
    pending = true;
    pending_streaming = s;
    streamed += s ? 1 : 0;
  }
  return streamed;
}

TEST(WindowStoreChoice, MeasuresOrdinaryStoresFirstThenStreamingOnce) {
  WindowStoreChoice choice;
  EXPECT_FALSE(choice.decide());  // nothing measured yet
  EXPECT_FALSE(choice.decide());
  choice.record(false, 1.0);
  EXPECT_TRUE(choice.decide());  // streaming not measured yet
  choice.record(true, 2.0);
  EXPECT_FALSE(choice.prefers_streaming());
  EXPECT_FALSE(choice.decide());
}

TEST(WindowStoreChoice, KeepsOrdinaryStoresWhereTheyAreFaster) {
  WindowStoreChoice choice;
  const int chunks = 2000;
  const int streamed = run_chunks(choice, chunks, 1.0, 1.4);
  EXPECT_FALSE(choice.prefers_streaming());
  // One first measurement, then probes ever further apart (8, 16, ... up to 256 chunks).
  EXPECT_GE(streamed, 2);
  EXPECT_LE(streamed, 16) << "streamed " << streamed << " of " << chunks << " chunks though it was slower";
}

TEST(WindowStoreChoice, SwitchesToStreamingWhereOrdinaryStoresAreSlow) {
  WindowStoreChoice choice;
  const int chunks = 2000;
  const int streamed = run_chunks(choice, chunks, 5.0, 1.0);
  EXPECT_TRUE(choice.prefers_streaming());
  EXPECT_GE(streamed, chunks - 16) << "streamed only " << streamed << " of " << chunks << " chunks";
}

TEST(WindowStoreChoice, FollowsTheMachineWhenItChanges) {
  WindowStoreChoice choice;
  run_chunks(choice, 500, 1.0, 1.4);
  ASSERT_FALSE(choice.prefers_streaming());
  // The host moves the CPUs apart: ordinary stores become 5x slower. Their average passes the
  // last measurement of streaming within a few chunks.
  run_chunks(choice, 300, 5.0, 1.4);
  EXPECT_TRUE(choice.prefers_streaming());
  // And back: the next probe of ordinary stores, at most 256 chunks away, finds them faster.
  run_chunks(choice, 300, 1.0, 1.4);
  EXPECT_FALSE(choice.prefers_streaming());
}

TEST(WindowStoreChoice, ProbesSoonAfterASwitch) {
  WindowStoreChoice choice;
  run_chunks(choice, 1000, 1.0, 1.4);  // probes now 256 chunks apart
  ASSERT_FALSE(choice.prefers_streaming());
  // A moment's slowness of ordinary stores switches to streaming; the probes come every few
  // chunks again, so the way back does not wait 256 chunks.
  run_chunks(choice, 3, 5.0, 1.4);
  ASSERT_TRUE(choice.prefers_streaming());
  run_chunks(choice, 20, 1.0, 1.4);
  EXPECT_FALSE(choice.prefers_streaming());
}

TEST(WindowStoreChoice, OneSlowChunkOfTheKindInUseDoesNotSwitch) {
  WindowStoreChoice choice;
  run_chunks(choice, 100, 1.0, 1.4);
  ASSERT_FALSE(choice.prefers_streaming());
  choice.record(false, 1.5);  // a hiccup: the average of the kind in use moves by a quarter of it
  EXPECT_FALSE(choice.prefers_streaming());
}

}  // namespace
}  // namespace dpl::comm::detail
