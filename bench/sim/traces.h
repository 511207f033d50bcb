// The traces spoke-sim replays, generated (seeded, deterministic). Each models a PyTorch-
// style loader: `workers` processes; epoch order = a permutation of the samples cut into
// batches; worker w takes batches w, w + workers, ...; per sample: open, read it in
// reads of up to 1 MiB, close, compute. Workers meet at a barrier after each epoch. With
// hints, worker 0 writes the epoch's whole order to .spoke-hints as the epoch starts.
#pragma once

#include <vector>

#include "bench/sim/sim.h"

namespace spoke::sim {

// scale < 1 shrinks the number of files (tests); 1 is what bench/RESULTS.md reports.
Trace ShuffledSmallFiles(double scale = 1);       // fresh permutation each epoch, fits the cache
Trace FixedOrder(double scale = 1);               // one permutation replayed every epoch
Trace ShuffledShards(double scale = 1);           // large shards, shuffled, each read sequentially
Trace TwiceTheCache(double scale = 1);            // shuffled small files, dataset = 2 x cache
Trace FixedOrderTwiceTheCache(double scale = 1);  // fixed order, dataset = 2 x cache
Trace PatternChange(double scale = 1);  // 2 x cache; fixed order for 2 epochs, then shuffled
std::vector<Trace> StandardTraces(double scale = 1);

}  // namespace spoke::sim
