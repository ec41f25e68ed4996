// The training and held-out token streams a TrainOptions implies, from the grammar corpus.
//
// train: data::corpus_token_stream(options.seed, options.corpus_tokens)
// val:   data::corpus_token_stream(options.val_seed(), options.val_tokens)   (another seed)
// Both deterministic, so a resumed run regenerates exactly the streams of the original run.
#pragma once

#include "data/tokenizer.h"
#include "train/batcher.h"
#include "train/train_options.h"

namespace minigpt {

struct CorpusStreams {
  TokenStream train;
  TokenStream val;
};

CorpusStreams make_corpus_streams(const TrainOptions& options, const Tokenizer& tokenizer);

}  // namespace minigpt
