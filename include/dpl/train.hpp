#pragma once
// Umbrella header: the Trainer and its extensions, checkpoints, multi-node evaluation and
// Chainer-style reports (log, table, progress bar).
#include "dpl/train/captured_step.hpp"
#include "dpl/train/checkpoint.hpp"
#include "dpl/train/console.hpp"
#include "dpl/train/evaluator.hpp"
#include "dpl/train/log_report.hpp"
#include "dpl/train/print_report.hpp"
#include "dpl/train/progress_bar.hpp"
#include "dpl/train/trainer.hpp"
