#include "train/corpus_streams.h"

#include "data/corpus.h"

namespace minigpt {

CorpusStreams make_corpus_streams(const TrainOptions& options, const Tokenizer& tokenizer) {
  CorpusStreams s;
  s.train = std::make_shared<const std::vector<int32_t>>(
      data::corpus_token_stream(options.seed, options.corpus_tokens, tokenizer));
  s.val = std::make_shared<const std::vector<int32_t>>(
      data::corpus_token_stream(options.val_seed(), options.val_tokens, tokenizer));
  return s;
}

}  // namespace minigpt
