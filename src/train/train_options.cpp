#include "train/train_options.h"

#include "core/error.h"

namespace minigpt {

void TrainOptions::validate() const {
  MINIGPT_CHECK(steps >= 1, "--steps must be >= 1, got {}", steps);
  MINIGPT_CHECK(batch >= 1 && batch <= 4096, "--batch must be in [1, 4096], got {}", batch);
  MINIGPT_CHECK(seq >= 1 && seq <= model.block_size,
                "--seq must be in [1, {}] (the model's context), got {}", model.block_size, seq);
  MINIGPT_CHECK(grad_clip >= 0.0f, "--clip must be >= 0, got {}", grad_clip);
  MINIGPT_CHECK(corpus_tokens >= 1 && val_tokens >= 1, "corpus sizes must be >= 1");
  MINIGPT_CHECK(eval_batches >= 1, "eval batches must be >= 1, got {}", eval_batches);
  schedule().validate();
  adamw.validate();
}

nlohmann::json TrainOptions::to_json() const {
  // The seed as a string: JSON readers in other languages lose integers above 2^53.
  return {{"seed", std::to_string(seed)},
          {"steps", steps},
          {"batch", batch},
          {"seq", seq},
          {"lr", lr},
          {"min_lr", min_lr},
          {"warmup", warmup},
          {"grad_clip", grad_clip},
          {"beta1", adamw.beta1},
          {"beta2", adamw.beta2},
          {"eps", adamw.eps},
          {"weight_decay", adamw.weight_decay},
          {"corpus_tokens", corpus_tokens},
          {"val_tokens", val_tokens},
          {"eval_batches", eval_batches},
          {"model", model.to_json()}};
}

TrainOptions TrainOptions::from_json(const nlohmann::json& j) {
  MINIGPT_CHECK(j.is_object(), "train options: expected a JSON object");
  auto get = [&](const char* key) -> const nlohmann::json& {
    MINIGPT_CHECK(j.contains(key), "train options: missing '{}'", key);
    return j.at(key);
  };
  try {
    TrainOptions o;
    o.seed = std::stoull(get("seed").get<std::string>());
    o.steps = get("steps").get<int64_t>();
    o.batch = get("batch").get<int64_t>();
    o.seq = get("seq").get<int64_t>();
    o.lr = get("lr").get<float>();
    o.min_lr = get("min_lr").get<float>();
    o.warmup = get("warmup").get<int64_t>();
    o.grad_clip = get("grad_clip").get<float>();
    o.adamw.beta1 = get("beta1").get<float>();
    o.adamw.beta2 = get("beta2").get<float>();
    o.adamw.eps = get("eps").get<float>();
    o.adamw.weight_decay = get("weight_decay").get<float>();
    o.corpus_tokens = get("corpus_tokens").get<int64_t>();
    o.val_tokens = get("val_tokens").get<int64_t>();
    o.eval_batches = get("eval_batches").get<int64_t>();
    o.model = ModelConfig::from_json(get("model"));
    o.validate();
    return o;
  } catch (const nlohmann::json::exception& e) {
    MINIGPT_FAIL("train options: {}", e.what());
  } catch (const std::logic_error& e) {  // stoull
    MINIGPT_FAIL("train options: bad seed ({})", e.what());
  }
}

}  // namespace minigpt
