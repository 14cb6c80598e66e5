#pragma once
// Umbrella header: IDX/MNIST loading, in-memory data sets, scattering over ranks, mini-batches,
// and the image pipeline (image lists, JPEG and PNG decoding, transforms, the threaded batch loader,
// normalisation of 8-bit batches on the device).
#include "dpl/data/batch_iterator.hpp"
#include "dpl/data/dataset.hpp"
#include "dpl/data/global_batch_iterator.hpp"
#include "dpl/data/global_batch_source.hpp"
#include "dpl/data/idx.hpp"
#include "dpl/data/image/decode.hpp"
#include "dpl/data/image/image_batch_source.hpp"
#include "dpl/data/image/jpeg.hpp"
#include "dpl/data/image/labeled_image_dataset.hpp"
#include "dpl/data/image/loader.hpp"
#include "dpl/data/image/normalize.hpp"
#include "dpl/data/image/png.hpp"
#include "dpl/data/image/transforms.hpp"
#include "dpl/data/random_access_dataset.hpp"
#include "dpl/data/scatter.hpp"
#include "dpl/data/token_loader.hpp"
#include "dpl/data/token_shard.hpp"
#include "dpl/data/tokenizer.hpp"
