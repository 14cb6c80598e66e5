// Data-parallel ResNet training on an ImageNet-style folder of JPEG files (ChainerMN's ImageNet
// example):
//
//   mpiexec -n 4 --bind-to none train_imagenet TRAIN_LIST VAL_LIST [--root DIR] [-a resnet50]
//       [-B 32] [--val-batchsize 32] [-E 90] [-j 4] [--mean R,G,B|none] [-o result]
//       [--communicator hierarchical] [-g] [--crop-size 224] [--dtype fp32|bf16|fp16]
//       [--layout nchw|nhwc] [--lr L] [--momentum 0.9] [--weight-decay 1e-4] [--warmup-epochs 0]
//       [--crop-scale 0.08] [--schedule step|cosine]
//       [--label-smoothing 0] [--classes N] [--log-interval N] [--synthetic] [--test] [--seed 0]
//       [--trace] [--graph] [--overlap [--bucket-mb 25] [--first-bucket-mb 1]] [--skip-bad-images]
//       [--sync-bn] [--zero 0|1|2] [--snapshot-every N] [--keep 1] [--resume PATH]
//
// Every rank reads both list files. Training: the ranks take their shares of each global batch
// (-B per process) from one order of the whole list, a function of the seed and the epoch, so a
// checkpoint (--snapshot-every) resumes on another number of processes with the same global batch
// (--resume; docs/training-state.md). Validation: each rank takes its own shard of the list. A
// threaded ImageLoader decodes, crops and flips the JPEG (and PNG) files into 8-bit batches; with -g those travel to the
// GPU as uint8 on a copy stream and are normalised there, into the model's dtype and layout (on
// the host without -g); a MultiNodeOptimizer averages the gradients;
// a Trainer runs the epochs, validation over every rank's validation shard, the report table,
// the progress bar, the JSON log and the phase summary (on rank 0).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <limits>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "../common/flags.hpp"
#include "../common/launch.hpp"
#include "../common/optimizer_state.hpp"
#include "../common/resume.hpp"
#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/models.hpp"
#include "dpl/optim/mixed_precision.hpp"
#include "dpl/parallel.hpp"
#include "dpl/train.hpp"

namespace {
using namespace dpl;
using examples::BadFlag;
using examples::parse_real;
using examples::parse_whole;

// ImageNet's channel means and standard deviations in pixel units (0..255), RGB.
const std::vector<float> kImageNetMean = {123.675f, 116.28f, 103.53f};
const std::vector<float> kImageNetStd = {58.395f, 57.12f, 57.375f};
// Batches per epoch of --synthetic data (a stand-in for an epoch, which has no files to count).
constexpr std::int64_t kSyntheticBatchesPerEpoch = 100;
// --test: at most this many batches per rank per epoch, for training and for validation.
constexpr std::int64_t kTestBatches = 3;

struct Options {
  std::string train_list, val_list, root;
  std::string arch = "resnet50";
  std::int64_t batchsize = 32;
  bool batchsize_given = false;  // -B on the command line (a resumed run otherwise takes the checkpoint's)
  std::int64_t val_batchsize = 0;  // 0: the training batch size
  std::int64_t epochs = 10;
  int loaders = 4;
  bool subtract_mean = true;
  std::vector<float> mean = kImageNetMean;
  std::string out = "result";
  std::string communicator = "hierarchical";
  bool gpu = false;
  int crop_size = 224;
  DType dtype = kFloat32;
  bool nhwc = false;
  double lr = -1.0;  // < 0: 0.1 x global batch / 256
  double momentum = 0.9;
  double weight_decay = 1e-4;
  double warmup_epochs = 0.0;
  double crop_scale = 0.08;     // smallest area fraction of the random-resized crop
  bool cosine = false;          // --schedule cosine: anneal to 0 over the run (else step decay)
  double label_smoothing = 0.0;
  std::int64_t classes = 0;       // 0: max label + 1
  std::int64_t log_interval = 0;  // iterations; 0: every epoch
  bool synthetic = false;
  bool test = false;
  bool trace = false;
  bool graph = false;
  bool sync_timing = false;
  bool skip_bad_images = false;  // an image that does not decode is skipped and reported, not fatal
  bool sync_bn = false;          // BatchNorm statistics over every rank's batch (parallel::convert_sync_batchnorm)
  bool checkpoint_blocks = false;  // each residual block recomputed in backward (ResNetOptions::checkpoint_blocks)
  parallel::OverlapOptions overlap;
  int zero = 0;  // ZeRO stage: 1 and 2 keep the momentum (and bf16/fp16 masters) of 1/p of the parameters per rank
  std::uint64_t seed = 0;
  std::int64_t snapshot_every = 0;  // epochs; 0: never
  std::int64_t keep = 1;
  std::string resume;
};

// The model's input form: its dtype and memory format. Every source below delivers batches in it
// (ImageBatchSource normalises into it, on the GPU with -g), so no step converts them again.
data::ImageDelivery input_form(Device device, DType dtype, bool nhwc) {
  return {device, dtype, nhwc ? MemoryFormat::kChannelsLast : MemoryFormat::kContiguous};
}

// The ResNet behind a check of its input, so the updater, the evaluator and the model see one
// module, and a source that delivered another form fails here by name instead of in a convolution.
class Classifier : public nn::Module {
 public:
  Classifier(std::shared_ptr<models::ResNet> net, data::ImageDelivery form)
      : net_(register_module("net", std::move(net))), form_(form) {}
  Variable forward(const Variable& x) override {
    const Tensor& t = x.data();
    const bool nhwc = form_.format == MemoryFormat::kChannelsLast;
    DPL_CHECK(t.dtype() == form_.dtype && (nhwc ? t.is_channels_last() : t.is_contiguous()),
              "Classifier: expected images of dtype ", form_.dtype, (nhwc ? " in channels-last" : " in NCHW"),
              " memory order, got ", t.dtype(), " of shape ", shape_str(t.shape()), " with strides ",
              shape_str(t.strides()));
    return (*net_)(x);
  }

 private:
  std::shared_ptr<models::ResNet> net_;
  data::ImageDelivery form_;
};

// Random images and labels made once and kept on the device: the step's throughput without the
// file system, the decoder or the host-to-device copy.
// Its position is global, like the image loader's, so that --snapshot-every and --resume work
// on it too (the images themselves are each rank's own).
class SyntheticSource : public data::GlobalBatchSource {
 public:
  SyntheticSource(std::int64_t batch, std::int64_t global_batch, int size, std::int64_t classes,
                  std::int64_t per_epoch, const data::ImageDelivery& form, std::uint64_t seed)
      : global_batch_(global_batch), per_epoch_(per_epoch) {
    Generator gen(seed);
    batch_.x = Tensor::uniform({batch, 3, size, size}, -2.f, 2.f, gen, TensorOptions(form.dtype, form.device));
    if (form.format == MemoryFormat::kChannelsLast) batch_.x = batch_.x.to_channels_last();
    std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
    for (auto& l : labels) l = static_cast<std::int32_t>(gen.below(static_cast<std::uint64_t>(classes)));
    batch_.y = Tensor::from_vector(labels, {batch}, form.device);
  }
  data::Batch next() override {
    ++iteration_;
    return batch_;
  }
  std::int64_t epoch() const override { return iteration_ / per_epoch_; }
  std::int64_t iteration() const override { return iteration_; }
  bool is_new_epoch() const override { return iteration_ > 0 && iteration_ % per_epoch_ == 0; }
  double epoch_detail() const override { return static_cast<double>(iteration_) / static_cast<double>(per_epoch_); }
  std::int64_t batches_per_epoch() const override { return per_epoch_; }
  std::int64_t global_batch() const override { return global_batch_; }
  data::GlobalDataState global_state() const override {
    data::GlobalDataState s;
    s.samples = per_epoch_ * global_batch_;
    s.global_batch = global_batch_;
    s.epoch = epoch();
    s.iteration = iteration_;
    s.position = (iteration_ % per_epoch_) * global_batch_;
    s.is_new_epoch = is_new_epoch();
    s.settings = {{"synthetic data", "on"}};
    return s;
  }
  void load_global_state(const data::GlobalDataState& s) override {
    data::check_same_data_order(s, global_state(), "SyntheticSource::load_global_state");
    DPL_CHECK(s.iteration >= 0, "SyntheticSource::load_global_state: expected an iteration >= 0, got ", s.iteration);
    iteration_ = s.iteration;
  }

 private:
  data::Batch batch_;
  std::int64_t global_batch_;
  std::int64_t per_epoch_;
  std::int64_t iteration_ = 0;
};

// The list's indices, in an order drawn from seed when shuffle is on (the same on every rank).
std::vector<std::int64_t> shuffled_indices(std::int64_t n, bool shuffle, std::uint64_t seed) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  if (shuffle) {
    // A class-sorted list would otherwise put a few classes only into a part of it.
    Generator gen(seed);
    for (std::int64_t i = n - 1; i > 0; --i)
      std::swap(order[static_cast<std::size_t>(i)],
                order[static_cast<std::size_t>(gen.below(static_cast<std::uint64_t>(i + 1)))]);
  }
  return order;
}

// The positions of this rank's validation shard: a block of the list cut by data::shard_of,
// unpadded, so that every image is evaluated once (see docs/imagenet.md).
std::vector<std::int64_t> shard_indices(std::int64_t n, const comm::Communicator& comm) {
  const data::Shard s = data::shard_of(n, comm.size(), comm.rank(), false);
  std::vector<std::int64_t> mine(static_cast<std::size_t>(s.length));
  std::iota(mine.begin(), mine.end(), s.begin);
  return mine;
}

// The largest label of the lists and where it stands ("list:line"), and the labels that occur.
struct Labels {
  std::int64_t top = -1;
  std::string where;
  std::set<std::int32_t> seen;
};
void add_labels(Labels& labels, const data::LabeledImageDataset& set, const std::string& list) {
  for (const auto& e : set.entries()) {
    labels.seen.insert(e.label);
    if (e.label > labels.top) {
      labels.top = e.label;
      labels.where = list + ":" + std::to_string(e.line);
    }
  }
}

// --skip-bad-images: after each epoch, every rank that skipped images says how many and names the
// first few with their reasons (each rank decodes only its own shard); at the end of the run every
// rank gives its totals, zero included, so a run that skipped nothing says so too.
class SkippedImagesReport : public train::Extension {
 public:
  SkippedImagesReport(const data::ImageLoader* train, const data::ImageLoader* val, int rank)
      : train_(train), val_(val), rank_(rank) {}
  std::string name() const override { return "SkippedImagesReport"; }

  // Runs at each epoch's end (its default trigger). The epoch is counted here: on a GPU each
  // loader may already have handed its next epoch's first batch to the copy stream. The
  // Evaluator, a writer that also runs every epoch, has run this epoch's validation (the
  // validation loader's epoch of the same number) before this reader.
  void operator()(train::Trainer&) override {
    const std::int64_t epoch = epochs_seen_++;
    print("epoch " + std::to_string(epoch + 1), train_ ? train_->skipped_report(epoch) : data::SkippedExamples{},
          val_ ? val_->skipped_report(epoch) : data::SkippedExamples{}, false);
  }
  // A resumed run's epochs go on from the checkpoint's.
  void resumed(train::Trainer& trainer) override { epochs_seen_ = trainer.updater().iterator().epoch(); }
  void finalize(train::Trainer&) override {
    print("the run", train_ ? train_->skipped_report() : data::SkippedExamples{},
          val_ ? val_->skipped_report() : data::SkippedExamples{}, true);
  }

 private:
  void print(const std::string& when, const data::SkippedExamples& train, const data::SkippedExamples& val,
             bool always) const {
    if (!always && train.count == 0 && val.count == 0) return;
    std::string text = "train_imagenet: " + when + ": rank " + std::to_string(rank_) + " skipped " +
                       std::to_string(train.count) + " training and " + std::to_string(val.count) +
                       " validation image(s) that could not be read (--skip-bad-images)";
    for (const data::SkippedExamples* r : {&train, &val})
      for (std::size_t i = 0; i < r->first.size(); ++i) text += "\n  " + r->first[i];
    if (train.count + val.count > static_cast<std::int64_t>(train.first.size() + val.first.size()))
      text += "\n  ...";
    std::cerr << text << std::endl;
  }

  const data::ImageLoader* train_;
  const data::ImageLoader* val_;
  int rank_;
  std::int64_t epochs_seen_ = 0;
};

int run(Options o) {
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator(o.communicator);
  // Ranks started with different flags would run different numbers of steps, or collectives of
  // different sizes, and wait for each other forever: refuse that now, naming the flag and ranks.
  // -o and --log-interval only shape rank 0's output; -j only each rank's own loader threads.
  std::string mean_text = o.subtract_mean ? "" : "none";
  for (const float m : o.mean) mean_text += (mean_text.empty() ? "" : ",") + examples::exact_text(m);
  comm::check_settings_agree(*comm,
                             {{"training list", o.train_list},
                              {"validation list", o.val_list},
                              {"image root (-R)", o.root},
                              {"architecture (-a)", o.arch},
                              {"batch size (-B)", std::to_string(o.batchsize)},
                              {"validation batch size (--val-batchsize)", std::to_string(o.val_batchsize)},
                              {"epochs (-E)", std::to_string(o.epochs)},
                              {"mean (-m)", mean_text},
                              {"communicator (--communicator)", o.communicator},
                              {"gpu (-g)", o.gpu ? "on" : "off"},
                              {"synchronized timing (--sync-timing)", o.sync_timing ? "on" : "off"},
                              {"crop size (--crop-size)", std::to_string(o.crop_size)},
                              {"dtype (--dtype)", dtype_name(o.dtype)},
                              {"layout (--layout)", o.nhwc ? "nhwc" : "nchw"},
                              {"learning rate (--lr)", o.lr < 0 ? "auto" : examples::exact_text(o.lr)},
                              {"momentum (--momentum)", examples::exact_text(o.momentum)},
                              {"weight decay (--weight-decay)", examples::exact_text(o.weight_decay)},
                              {"warmup epochs (--warmup-epochs)", examples::exact_text(o.warmup_epochs)},
                              {"label smoothing (--label-smoothing)", examples::exact_text(o.label_smoothing)},
                              {"classes (--classes)", std::to_string(o.classes)},
                              {"synthetic data (--synthetic)", o.synthetic ? "on" : "off"},
                              {"test run (--test)", o.test ? "on" : "off"},
                              {"seed (--seed)", std::to_string(o.seed)},
                              {"snapshot interval (--snapshot-every)", std::to_string(o.snapshot_every)},
                              {"resumed checkpoint (--resume)", o.resume},
                              {"graph capture (--graph)", o.graph ? "on" : "off"},
                              {"skip bad images (--skip-bad-images)", o.skip_bad_images ? "on" : "off"},
                              // Every synchronised layer is a collective: all ranks or none.
                              {"synchronised BatchNorm (--sync-bn)", o.sync_bn ? "on" : "off"},
                              // The buckets are the collectives: ranks that cut them differently never meet.
                              {"overlap (--overlap)", o.overlap.enabled ? "on" : "off"},
                              {"ZeRO stage (--zero)", std::to_string(o.zero)},
                              {"bucket bytes (--bucket-mb)", std::to_string(o.overlap.bucket_bytes)},
                              {"first bucket bytes (--first-bucket-mb)", std::to_string(o.overlap.first_bucket_bytes)}},
                             "train_imagenet");
  const bool root = comm->rank() == 0;

  const Device device = examples::device_for_rank(o.gpu, *comm);

  // Every rank reads both lists (text, small next to the images): a bad line fails on every
  // rank alike, with the list's file:line, and every rank knows the class count.
  std::shared_ptr<data::LabeledImageDataset> train_set, val_set;
  std::int64_t classes = o.classes;
  if (!o.synthetic) {
    train_set = std::make_shared<data::LabeledImageDataset>(o.train_list, o.root);
    val_set = std::make_shared<data::LabeledImageDataset>(o.val_list, o.root);
    DPL_CHECK(train_set->size() > 0, o.train_list, ": expected at least one `path label` line, got none");
    DPL_CHECK(val_set->size() > 0, o.val_list, ": expected at least one `path label` line, got none");
    // The lists' contents, not only their names: ranks on unshared file systems, or with stale
    // copies, would otherwise train on mismatched labels without a word.
    comm::check_settings_agree(*comm,
                               {{"training list contents (" + o.train_list + ")", train_set->contents_fingerprint()},
                                {"validation list contents (" + o.val_list + ")", val_set->contents_fingerprint()}},
                               "train_imagenet");
    Labels labels;
    add_labels(labels, *train_set, o.train_list);
    add_labels(labels, *val_set, o.val_list);
    const auto distinct = static_cast<std::int64_t>(labels.seen.size());
    if (classes == 0) {
      // A mistyped label (2000000000 for 2) would size the classifier for two billion classes and
      // end in an allocation failure that names no label: a class count that most classes would
      // leave without a sample is refused unless --classes says it is meant.
      DPL_CHECK(labels.top < 1000 || labels.top + 1 <= 2 * distinct, labels.where, ": label ", labels.top,
                " would make ", labels.top + 1, " classes, but the lists hold ", distinct,
                " distinct labels; correct the label, or give --classes to train that many classes");
      classes = labels.top + 1;
    }
    DPL_CHECK(labels.top < classes, "--classes ", classes, " is too few: ", labels.where, " has label ", labels.top);
  } else if (classes == 0) {
    classes = 1000;
  }

  const std::int64_t global_batch = examples::resumed_global_batch("train_imagenet", "-B", o.batchsize,
                                                                   o.batchsize_given, o.resume, comm->size());
  o.batchsize = global_batch / comm->size();
  const double lr = o.lr >= 0 ? o.lr : 0.1 * static_cast<double>(global_batch) / 256.0;
  if (root) {
    std::cout << "==========================================\n"
              << "Num process (COMM_WORLD): " << comm->size() << "\n"
              << (o.gpu ? "Using GPUs\n" : "") << "Using " << o.communicator << " communicator\n"
              << "Num Minibatch-size: " << o.batchsize << " (global " << global_batch << ")\n"
              << "Num epoch: " << o.epochs << "\n"
              << "Arch: " << o.arch << ", classes: " << classes << ", dtype: " << dtype_name(o.dtype)
              << ", layout: " << (o.nhwc ? "nhwc" : "nchw") << ", lr: " << lr << "\n"
              << "==========================================" << std::endl;
  }

  const data::ImageDelivery form = input_form(device, o.dtype, o.nhwc);
  std::shared_ptr<data::GlobalBatchSource> train_source;
  std::shared_ptr<data::BatchSource> val_source;
  std::int64_t val_batches = 0;
  // The loaders, owned by the sources: the skip report reads their counts.
  const data::ImageLoader* train_loader = nullptr;
  const data::ImageLoader* val_loader_seen = nullptr;
  if (o.synthetic) {
    const std::int64_t per_epoch = o.test ? kTestBatches : kSyntheticBatchesPerEpoch;
    train_source = std::make_shared<SyntheticSource>(o.batchsize, global_batch, o.crop_size, classes, per_epoch, form,
                                                     o.seed + 1000 + static_cast<std::uint64_t>(comm->rank()));
  } else {
    // The whole list for training, each global batch split among the ranks by the loader; with
    // --test, the global batches of its first few steps, drawn from the whole list by the seed.
    std::vector<std::int64_t> train_idx = shuffled_indices(train_set->size(), o.test, o.seed);
    std::vector<std::int64_t> val_idx = shard_indices(val_set->size(), *comm);
    if (o.test) {
      train_idx.resize(std::min<std::size_t>(train_idx.size(), static_cast<std::size_t>(kTestBatches * global_batch)));
      val_idx.resize(std::min<std::size_t>(val_idx.size(), static_cast<std::size_t>(kTestBatches * o.val_batchsize)));
    }
    // Every rank has the whole list, so every rank reaches the same verdict and none is left waiting.
    const auto share = static_cast<std::int64_t>(train_idx.size()) / comm->size();
    DPL_CHECK(global_batch <= static_cast<std::int64_t>(train_idx.size()), "-B ", o.batchsize,
              " is larger than each process's share of the training list (", share, " of its ", train_idx.size(),
              " images on each of ", comm->size(), " processes); use -B ", share, " or less");
    DPL_CHECK(!val_idx.empty(), o.val_list, " has ", val_set->size(), " images, fewer than the ", comm->size(),
              " processes; expected at least one per process");
    const std::vector<float> mean = o.subtract_mean ? o.mean : std::vector<float>{0.f};
    const std::vector<float> scale = o.subtract_mean ? kImageNetStd : std::vector<float>{255.f};

    data::ImageLoaderOptions lo;
    lo.batch_size = o.batchsize;
    lo.workers = o.loaders;
    lo.shuffle = true;
    lo.seed = o.seed;
    lo.drop_last = true;  // every step has the global batch the learning rate was scaled for
    lo.rank = comm->rank();
    lo.world_size = comm->size();
    lo.pin_memory = o.gpu;
    // --skip-bad-images: a training image that does not decode is replaced by a copy of another of
    // its batch, so every rank keeps stepping on full batches of the size the learning rate was
    // scaled for (a shorter batch on one rank would weigh its images more in the average).
    lo.skip_bad = o.skip_bad_images;
    lo.keep_batch_size = true;
    // On the GPU the source keeps the batch whose copy is in flight from one step to the next: one
    // more buffer keeps the decoders as far ahead as on the host.
    if (o.gpu) lo.prefetch = 3;
    data::ImageTransform train_transform = data::ImageTransform::train(o.crop_size);
    train_transform.scale_min = o.crop_scale;
    auto loader = std::make_unique<data::ImageLoader>(train_set, std::move(train_idx), train_transform, lo);
    train_loader = loader.get();
    train_source = std::make_shared<data::ImageBatchSource>(std::move(loader), mean, scale, form);
    // A resumed run must read the same list (by content: the list's file may move).
    train_source->set_order_settings({{"training list contents", train_set->contents_fingerprint()},
                                      {"test run (--test)", o.test ? "on" : "off"}});

    data::ImageLoaderOptions vo = lo;
    vo.batch_size = o.val_batchsize;
    vo.workers = std::max(1, o.loaders / 2);
    vo.shuffle = false;  // every evaluation sees the same batches
    vo.drop_last = false;
    vo.rank = 0;  // its own shard of the validation list, whole
    vo.world_size = 1;
    // A validation image that does not decode is replaced too (keep_batch_size, from lo): left
    // out, it could empty a batch of a small shard, and a batch without images cannot be
    // evaluated. Its batch-mate then counts twice, one image in tens of thousands for ImageNet.
    auto val_loader = std::make_unique<data::ImageLoader>(val_set, std::move(val_idx),
                                                         data::ImageTransform::validation(o.crop_size), vo);
    val_batches = val_loader->batches_per_epoch();
    val_loader_seen = val_loader.get();
    val_source = std::make_shared<data::ImageBatchSource>(std::move(val_loader), mean, scale, form);
  }

  // The same seed on every rank: identical models (the optimizer's setup broadcasts rank 0's
  // anyway, and checks that every rank registered the same parameters).
  Generator init(o.seed);
  models::ResNetOptions ro;
  ro.num_classes = classes;
  ro.checkpoint_blocks = o.checkpoint_blocks;
  auto net = models::resnet(o.arch, ro, init);
  if (o.nhwc) nn::to_channels_last(*net);
  if (o.sync_bn) parallel::convert_sync_batchnorm(*net, comm);
  Classifier model(net, form);
  model.to(device);
  if (root) std::cout << "Num parameters: " << model.num_parameters() << std::endl;

  auto sgd = std::make_unique<optim::MomentumSGD>(static_cast<float>(lr), static_cast<float>(o.momentum));
  sgd->set_weight_decay(static_cast<float>(o.weight_decay));
  std::unique_ptr<optim::Optimizer> actual = std::move(sgd);
  if (o.dtype != kFloat32) actual = optim::mixed_precision(std::move(actual), o.dtype);
  // Non-intrusive timing measures each phase on the host: on a GPU that is the time to queue its
  // kernels. Synchronized timing waits for the device (and the other ranks) at each phase's end.
  auto optimizer = parallel::create_multi_node_optimizer(
      std::move(actual), comm,
      o.sync_timing ? profile::TimingMode::kSynchronized : profile::TimingMode::kNonIntrusive);
  optimizer->set_overlap(o.overlap);
  optimizer->set_zero_stage(o.zero);
  optimizer->setup(model);
  examples::print_optimizer_state_bytes(*optimizer);

  const float smoothing = static_cast<float>(o.label_smoothing);
  train::StandardUpdater updater(*train_source, *optimizer, [&](const data::Batch& b, train::Observation& observation) {
    const Variable logits = model(Variable(b.x));
    observation.observe("main/accuracy", accuracy(logits, b.y));
    return softmax_cross_entropy(logits, b.y, smoothing);
  }, device);
  if (o.graph) updater.set_graph_capture(true);

  // Linear warmup from 0 to lr over --warmup-epochs, then either lr divided by 10 at 30, 60 and
  // 80 epochs (Goyal et al.'s ResNet-50 schedule, for the global batch the lr was scaled to) or,
  // with --schedule cosine, a cosine from lr to 0 over the remaining iterations (for short runs,
  // which the 30/60/80 milestones never reach).
  const std::int64_t per_epoch = train_source->batches_per_epoch();
  const auto warmup = static_cast<std::int64_t>(o.warmup_epochs * static_cast<double>(per_epoch) + 0.5);
  std::shared_ptr<const optim::LrSchedule> decay;
  if (o.cosine) {
    decay = std::make_shared<const optim::CosineAnnealing>(lr, 0.0, std::max<std::int64_t>(1, o.epochs * per_epoch - warmup));
  } else {
    std::vector<std::int64_t> milestones;
    for (std::int64_t e : {30, 60, 80})
      if (e < o.epochs) milestones.push_back(e * per_epoch);
    decay = std::make_shared<const optim::MultiStepDecay>(lr, 0.1, milestones);
  }
  const optim::LinearWarmup schedule(decay, 0.0, warmup);

  train::Trainer trainer(updater, train::TrainerOptions(o.epochs, train::LengthUnit::kEpoch).communicator(comm).out(o.out));
  trainer.extend(std::make_shared<train::extensions::LrScheduler>(schedule));
  if (val_source) trainer.extend(std::make_shared<train::extensions::Evaluator>(val_source, val_batches));
  const train::Trigger log_trigger =
      o.log_interval > 0 ? train::Trigger::iterations(o.log_interval) : train::Trigger::epochs(1);
  trainer.extend(std::make_shared<train::extensions::LogReport>(), log_trigger);
  trainer.extend(std::make_shared<train::extensions::PrintReport>(), log_trigger);
  trainer.extend(std::make_shared<train::extensions::ProgressBar>());
  trainer.extend(std::make_shared<train::extensions::PhaseSummary>());
  if (o.skip_bad_images) trainer.extend(std::make_shared<SkippedImagesReport>(train_loader, val_loader_seen, comm->rank()));
  if (o.snapshot_every > 0)
    trainer.extend(std::make_shared<train::extensions::Snapshot>("", o.keep), train::Trigger::epochs(o.snapshot_every));
  if (!o.resume.empty()) trainer.resume(o.resume);
  trainer.run();
  // Each rank writes its own timeline; tools/merge_traces.py puts them on one time axis.
  if (o.trace)
    optimizer->timer().write_chrome_trace(o.out + "/trace_rank" + std::to_string(comm->rank()) + ".json", comm->rank());
  return 0;
}

std::vector<float> parse_mean(const std::string& text, bool& subtract) {
  subtract = text != "none";
  if (!subtract) return {};
  std::vector<float> mean;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    mean.push_back(static_cast<float>(parse_real("--mean", text.substr(start, comma - start), 0.0, 255.0)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (mean.size() != 3)
    throw BadFlag{"--mean must be three values R,G,B in pixel units (0..255) or 'none', got '" + text + "'"};
  return mean;
}
}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string batchsize = "32", val_batchsize = "0", epochs = "10", loaders = "4", mean = "123.675,116.28,103.53",
              zero = "0", crop = "224", dtype = "fp32", layout = "nchw", lr = "", momentum = "0.9", weight_decay = "0.0001",
              warmup = "0", crop_scale = "0.08", schedule = "step", smoothing = "0", classes = "0", log_interval = "0",
              seed = "0", bucket_mb = "25", first_bucket_mb = "1", snapshot_every = "0", keep = "1";
  bool shard_state = false;
  CLI::App app{"Data-parallel ResNet training on ImageNet-style JPEG lists with dpl (ChainerMN's example)"};
  app.add_option("train", o.train_list, "List of training images: `relative/path.jpg label` per line");
  app.add_option("val", o.val_list, "List of validation images, in the same format");
  app.add_option("-R,--root", o.root, "Folder the list's relative paths start from");
  app.add_option("-a,--arch", o.arch, "Model: resnet18, resnet34, resnet50, resnet101 or resnet152");
  app.add_option("-B,--batchsize", batchsize,
                 "Training images per mini-batch, per process (with --resume, default: the checkpoint's global batch "
                 "divided among the processes)");
  app.add_option("--val-batchsize", val_batchsize, "Validation images per mini-batch, per process (default: -B)");
  app.add_option("-E,--epoch", epochs, "Number of sweeps over the training list");
  app.add_option("-j,--loaderjob", loaders, "Threads that decode and transform images, per process");
  app.add_option("-m,--mean", mean, "Per-channel mean R,G,B in pixel units to subtract, or 'none'");
  app.add_option("-o,--out", o.out, "Directory to output the result");
  app.add_option("--communicator", o.communicator, "Type of communicator");
  app.add_flag("-g,--gpu", o.gpu, "Train on GPUs (one per process, chosen by the rank within the node)");
  app.add_option("--crop-size", crop, "Height and width of the crops the model sees");
  app.add_option("--dtype", dtype, "Compute dtype: fp32, or bf16/fp16 on float32 master weights");
  app.add_option("--layout", layout, "Activation layout: nchw or nhwc (channels-last)");
  app.add_option("--lr", lr, "Learning rate (default: 0.1 x global batch / 256)");
  app.add_option("--momentum", momentum, "Momentum of MomentumSGD");
  app.add_option("--weight-decay", weight_decay, "Weight decay, applied to every parameter");
  app.add_option("--warmup-epochs", warmup, "Epochs of linear learning-rate warmup from 0");
  app.add_option("--crop-scale", crop_scale, "Smallest area fraction of the random-resized training crop, in (0, 1]");
  app.add_option("--schedule", schedule, "Learning-rate decay after warmup: step (/10 at epochs 30, 60, 80) or cosine");
  app.add_option("--label-smoothing", smoothing, "Label smoothing of the cross-entropy, in [0, 1)");
  app.add_option("--classes", classes, "Number of classes (default: the lists' largest label + 1)");
  app.add_option("--log-interval", log_interval, "Report every N iterations (default 0: every epoch)");
  app.add_flag("--synthetic", o.synthetic, "Random images resident on the device instead of files (throughput)");
  app.add_flag("--sync-timing", o.sync_timing,
               "Wait for the device and the other ranks at the end of each phase: phase times that include GPU work");
  app.add_flag("--trace", o.trace, "Write a Chrome trace of the phases per rank into the output folder");
  app.add_flag("--sync-bn", o.sync_bn,
               "Synchronised BatchNorm: training statistics over every process's batch together");
  app.add_flag("--graph", o.graph, "Record the training step as a CUDA graph and replay it (-g, one process)");
  app.add_flag("--checkpoint-blocks", o.checkpoint_blocks,
               "Keep only each residual block's input for backward and compute the block again there (less memory)");
  app.add_flag("--overlap", o.overlap.enabled, "Average each bucket of gradients while backward still runs");
  app.add_option("--zero", zero,
                 "ZeRO stage: 0 off; 1 keeps the momentum (and bf16/fp16 master weights) of 1/p of the parameters on "
                 "each rank (reduce-scatter, update, allgather); 2 also reduce-scatters the gradients bucket by bucket "
                 "(during backward with --overlap)");
  app.add_flag("--shard-optimizer-state", shard_state, "The same as --zero 1");
  app.add_option("--bucket-mb", bucket_mb, "Megabytes (MiB) of gradients per overlapped bucket");
  app.add_option("--first-bucket-mb", first_bucket_mb, "MiB of the first bucket, the one backward finishes first");
  app.add_flag("--skip-bad-images", o.skip_bad_images,
               "Skip an image that cannot be read or decoded (replaced by a copy of another of its batch), and "
               "report how many and which at each epoch's end and the run's");
  app.add_flag("--test", o.test, "A tiny run: at most 3 batches per process per epoch");
  app.add_option("--seed", seed, "Seed for initialisation, sharding, shuffling and augmentation");
  app.add_option("--snapshot-every", snapshot_every, "Write a checkpoint into the output folder every N epochs (0: never)");
  app.add_option("--keep", keep, "Number of the newest checkpoints to keep");
  app.add_option("--resume", o.resume, "Continue the run saved in this checkpoint file (on any number of processes "
                                       "that divides its global batch)");
  CLI11_PARSE(app, argc, argv);
  o.batchsize_given = app.count("-B") > 0;
  try {
    constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    o.batchsize = static_cast<std::int64_t>(parse_whole("-B", batchsize, 1, std::uint64_t{1} << 24));
    o.val_batchsize = static_cast<std::int64_t>(parse_whole("--val-batchsize", val_batchsize, 0, std::uint64_t{1} << 24));
    if (o.val_batchsize == 0) o.val_batchsize = o.batchsize;
    o.epochs = static_cast<std::int64_t>(parse_whole("-E", epochs, 1, 100000));
    o.loaders = static_cast<int>(parse_whole("-j", loaders, 1, 256));
    o.mean = parse_mean(mean, o.subtract_mean);
    o.crop_size = static_cast<int>(parse_whole("--crop-size", crop, 1, 4096));
    if (dtype == "fp32") o.dtype = kFloat32;
    else if (dtype == "bf16") o.dtype = kBFloat16;
    else if (dtype == "fp16") o.dtype = kFloat16;
    else throw BadFlag{"--dtype must be fp32, bf16 or fp16, got '" + dtype + "'"};
    if (layout != "nchw" && layout != "nhwc") throw BadFlag{"--layout must be nchw or nhwc, got '" + layout + "'"};
    o.nhwc = layout == "nhwc";
    if (!lr.empty()) o.lr = parse_real("--lr", lr, 0.0, 1e6);
    o.momentum = parse_real("--momentum", momentum, 0.0, 1.0);
    o.weight_decay = parse_real("--weight-decay", weight_decay, 0.0, 1.0);
    o.warmup_epochs = parse_real("--warmup-epochs", warmup, 0.0, 100000.0);
    o.crop_scale = parse_real("--crop-scale", crop_scale, 0.0, 1.0);
    if (!(o.crop_scale > 0.0)) throw BadFlag{"--crop-scale must be in (0, 1], got " + crop_scale};
    if (schedule != "step" && schedule != "cosine")
      throw BadFlag{"--schedule must be step or cosine, got '" + schedule + "'"};
    o.cosine = schedule == "cosine";
    o.label_smoothing = parse_real("--label-smoothing", smoothing, 0.0, 0.999);
    o.classes = static_cast<std::int64_t>(parse_whole("--classes", classes, 0, std::uint64_t{1} << 31));
    o.log_interval = static_cast<std::int64_t>(parse_whole("--log-interval", log_interval, 0, kMax));
    o.seed = parse_whole("--seed", seed, 0, kMax);
    o.snapshot_every = static_cast<std::int64_t>(parse_whole("--snapshot-every", snapshot_every, 0, 1000000));
    o.keep = static_cast<std::int64_t>(parse_whole("--keep", keep, 1, 1000000));
    const double mib = 1024.0 * 1024.0;
    o.overlap.bucket_bytes = static_cast<std::size_t>(parse_real("--bucket-mb", bucket_mb, 1e-6, 1e6) * mib);
    o.overlap.first_bucket_bytes =
        static_cast<std::size_t>(parse_real("--first-bucket-mb", first_bucket_mb, 1e-6, 1e6) * mib);
    o.zero = examples::parse_zero_stage(zero, shard_state, o.overlap.enabled);
    const auto archs = models::resnet_archs();
    if (std::find(archs.begin(), archs.end(), o.arch) == archs.end())
      throw BadFlag{"-a must be resnet18, resnet34, resnet50, resnet101 or resnet152, got '" + o.arch + "'"};
    if (!o.synthetic && (o.train_list.empty() || o.val_list.empty()))
      throw BadFlag{"expected TRAIN_LIST and VAL_LIST (or --synthetic), got " +
                    std::string(o.train_list.empty() ? "neither" : "only TRAIN_LIST")};
    if (o.out.empty()) throw BadFlag{"-o must name an output folder, got an empty string"};
    if (o.graph && !o.gpu) throw BadFlag{"--graph records the step as a CUDA graph and needs -g"};
    if (o.sync_bn && (o.graph || o.overlap.enabled))
      throw BadFlag{"--sync-bn runs a collective in every BatchNorm layer, which neither a recorded step (--graph) nor "
                    "the overlapped allreduce (--overlap) can interleave with; drop one of them"};
  } catch (const BadFlag& e) {
    std::cerr << "train_imagenet: " << e.message << "\n";
    return 2;
  }
  return examples::run_or_abort(o.out, [&] { return run(o); });
}
