// import-megatron: the static reading of launch scripts, the flag table, and three real scripts
// of NVIDIA/Megatron-LM's examples/ (tests/data/megatron-import/SOURCES.md) against their values.
#include "plan/megatron_import.hpp"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "plan/derived.hpp"
#include "plan/plan_io.hpp"
#include "plan/shell_script.hpp"

namespace meshwork::plan {
namespace {

namespace fs = std::filesystem;
const fs::path kData = fs::path(MESHWORK_SOURCE_DIR) / "tests/data/megatron-import";

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool mentions(const std::vector<std::string>& lines, std::string_view what) {
  for (const auto& l : lines) {
    if (l.find(what) != std::string::npos) return true;
  }
  return false;
}

TEST(ShellScript, VariablesDefaultsArithmeticAndArrays) {
  const auto r = read_shell_script(
      "#!/bin/bash\n"
      "NUM_LAYERS=32  # a comment\n"
      "export TP=${TP:-4}\n"
      "NODES=${1:-2}\n"
      "WORLD=$(( 8 * $NODES ))\n"
      "HALF=$((NUM_LAYERS / 2))\n"
      "ARGS=(\n"
      "  --num-layers $NUM_LAYERS   # inline comment\n"
      "  --tensor-model-parallel-size ${TP}\n"
      ")\n"
      "ARGS+=(\"--seq-length 4096\")\n"
      "QUOTED=(\"a b\" c)\n"
      "torchrun --nproc_per_node 8 --nnodes $NODES pretrain_gpt.py ${ARGS[@]} \\\n"
      "    --hidden-size 4096 \"${QUOTED[@]}\" --x \"$WORLD\" --y $HALF\n");
  ASSERT_EQ(r.commands.size(), 1u);
  const std::vector<std::string> want = {"torchrun", "--nproc_per_node", "8", "--nnodes", "2", "pretrain_gpt.py",
                                         "--num-layers", "32", "--tensor-model-parallel-size", "4", "--seq-length", "4096",
                                         "--hidden-size", "4096", "a b", "c", "--x", "16", "--y", "16"};
  EXPECT_EQ(r.commands[0].words, want);
  EXPECT_EQ(r.commands[0].line, 13);
  EXPECT_TRUE(mentions(r.unknowns, "$1") || mentions(r.unknowns, "${1}")) << "positional parameters are named";
}

TEST(ShellScript, ConditionsOnKnownValuesAndWhatCannotBeKnown) {
  const auto r = read_shell_script(
      "DTYPE=\"fp8\"\n"
      "EXTRA=()\n"
      "if [[ \"$DTYPE\" == \"fp8\" ]]; then\n"
      "  EXTRA+=(--fp8-format hybrid)\n"
      "elif [ \"$DTYPE\" = bf16 ]; then\n"
      "  EXTRA+=(--bf16)\n"
      "else\n"
      "  EXTRA+=(--fp16)\n"
      "fi\n"
      "if [ -n \"${WANDB_API_KEY}\" ]; then EXTRA+=(--wandb); fi\n"
      "if [ ! -f x.py ]; then exit 1; fi\n"
      "HOST=$(hostname)\n"
      "for i in 1 2; do echo $i; done\n"
      "python train.py ${EXTRA[@]} --name $HOST\n",
      {{"UNUSED", "1"}});
  ASSERT_EQ(r.commands.size(), 1u);
  const std::vector<std::string> want = {"python", "train.py", "--fp8-format", "hybrid", "--name", "$(hostname)"};
  EXPECT_EQ(r.commands[0].words, want);
  EXPECT_TRUE(mentions(r.unknowns, "$(hostname) is a command substitution"));
  EXPECT_TRUE(mentions(r.unknowns, "WANDB_API_KEY"));
  EXPECT_TRUE(mentions(r.unknowns, "cannot be decided statically"));
  EXPECT_TRUE(mentions(r.unknowns, "`for` loop"));
  // A value given from outside takes the environment's place.
  const auto given = read_shell_script("python t.py --nnodes ${NODES}\n", {{"NODES", "16"}});
  EXPECT_EQ(given.commands[0].words.back(), "16");
}

// Redirections are not arguments, and a here-document's body is not script.
TEST(ShellScript, RedirectionsAndHereDocumentsAreNotWords) {
  const auto r = read_shell_script(
      "TP=2\n"
      "cat > cfg.yaml <<EOF\n"
      "TP=4\n"
      "python not_a_command.py\n"
      "EOF\n"
      "cat <<-'END' >/dev/null\n"
      "\tTP=8\n"
      "\tEND\n"
      "torchrun pretrain_gpt.py --tensor-model-parallel-size $TP > log.txt 2>&1 | tee -a out.log\n"
      "python b.py --x 1 &>all.log\n");
  ASSERT_EQ(r.commands.size(), 5u);  // cat, cat, torchrun, tee, python
  EXPECT_EQ(r.commands[0].words, (std::vector<std::string>{"cat"}));
  EXPECT_EQ(r.commands[2].words, (std::vector<std::string>{"torchrun", "pretrain_gpt.py", "--tensor-model-parallel-size", "2"}));
  EXPECT_EQ(r.commands[2].line, 9);
  EXPECT_EQ(r.commands[4].words, (std::vector<std::string>{"python", "b.py", "--x", "1"}));
  EXPECT_EQ(r.variables.at("TP"), "2");
  EXPECT_TRUE(mentions(r.unknowns, "here-document"));
}

// A branch not taken changes nothing, and a value given from outside survives `:=`.
TEST(ShellScript, BranchesNotTakenHaveNoSideEffects) {
  const auto r = read_shell_script(
      "if false; then\n"
      "  if [ \"${A:=set}\" = x ]; then B=1; fi\n"
      "elif [ \"${C:=set}\" = \"$UNKNOWN\" ]; then D=1\n"
      "fi\n"
      "if true; then E=1; elif [ \"${F:=set}\" = y ]; then G=1; fi\n"
      ": ${FIXED:=default}\n",
      {{"FIXED", ""}});
  EXPECT_EQ(r.variables.count("A"), 0u);
  EXPECT_EQ(r.variables.count("F"), 0u);
  EXPECT_EQ(r.variables.at("C"), "set");  // the elif after a false `if` is evaluated
  EXPECT_EQ(r.variables.at("E"), "1");
  EXPECT_EQ(r.variables.at("FIXED"), "");
  EXPECT_FALSE(mentions(r.unknowns, "${F:=set}"));
}

// Hostile input ends, quickly and without a crash: deep nesting, exponential growth, overflow.
TEST(ShellScript, HostileScriptsAreBoundedNotFollowed) {
  std::string deep = "X=$((";
  for (int i = 0; i < 5000; ++i) deep += "(";
  deep += "1";
  for (int i = 0; i < 5000; ++i) deep += ")";
  deep += "))\nN=$((";
  for (int i = 0; i < 5000; ++i) deep += "- ";
  deep += "1))\nD=";
  for (int i = 0; i < 5000; ++i) deep += "${A:-";
  deep += "x";
  for (int i = 0; i < 5000; ++i) deep += "}";
  deep += "\n";
  for (int i = 0; i < 5000; ++i) deep += "if true; then\n";
  deep += "Y=1\n";
  for (int i = 0; i < 5000; ++i) deep += "fi\n";
  deep += "python t.py --y $Y\n";
  const auto d = read_shell_script(deep);
  EXPECT_EQ(d.variables.count("X"), 1u);
  EXPECT_TRUE(mentions(d.unknowns, "nested deeper than 64"));
  EXPECT_TRUE(mentions(d.unknowns, "cannot be evaluated statically"));
  ASSERT_FALSE(d.commands.empty());
  EXPECT_EQ(d.commands.back().words.front(), "python");

  std::string grow = "A=x\nB=(x)\n";
  for (int i = 0; i < 40; ++i) grow += "A=$A$A\nB+=(${B[@]} ${B[@]})\n";
  const auto g = read_shell_script(grow);
  EXPECT_TRUE(mentions(g.unknowns, "A grows past 64 KiB"));
  EXPECT_TRUE(mentions(g.unknowns, "B grows past"));

  const auto o = read_shell_script(
      "BIG=$((99999999999999999999))\nM=-9223372036854775808\nQ=$((M / -1))\nR=$((9223372036854775807 + 1))\n"
      "P=$((3037000500 * 3037000500))\nOK=$((7 / 2 + 7 % 2 - -1))\n");
  EXPECT_TRUE(o.variables.at("BIG").find("$((") == 0);  // left as written
  EXPECT_TRUE(o.variables.at("Q").find("$((") == 0);
  EXPECT_TRUE(o.variables.at("R").find("$((") == 0);
  EXPECT_TRUE(o.variables.at("P").find("$((") == 0);
  EXPECT_EQ(o.variables.at("OK"), "5");
}

// Every flag of the pinned arguments.py is classified: mapped to a field, or ignored with a reason.
TEST(MegatronImport, EveryFlagOfThePinnedArgumentsIsClassified) {
  std::istringstream lines(read(kData / "arguments-flags.txt"));
  std::string line;
  std::set<std::string> listed;
  int mapped = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::string flag = line.substr(0, line.find(' '));
    listed.insert(flag);
    const auto c = classify_megatron_flag(flag);
    ASSERT_TRUE(c) << flag << " is in arguments.py but not in plan/megatron_flags.inc";
    if (c->mapped) {
      ++mapped;
      EXPECT_FALSE(c->field.empty()) << flag;
    } else {
      EXPECT_GT(c->reason.size(), 5u) << flag;
    }
  }
  EXPECT_EQ(listed.size(), megatron_flags().size()) << "the compiled table and the pinned list differ";
  EXPECT_GE(listed.size(), 560u);
  EXPECT_GE(mapped, 60);
  EXPECT_FALSE(classify_megatron_flag("--not-a-megatron-flag"));
}

// The import as a plan: with a GPU it loads and resolves.
Plan load(const MegatronImport& r) {
  nlohmann::json tree = r.plan;
  tree["cluster"]["gpu"] = "h100-sxm";
  const auto loaded = load_plan_json(tree);
  std::string problems;
  for (const auto& d : loaded.diagnostics.items()) problems += format(d) + "\n";
  EXPECT_TRUE(loaded.ok()) << problems << tree.dump(2);
  return loaded.plan;
}

TEST(MegatronImport, Gpt3_175bExampleScript) {
  MegatronImport r = import_megatron_script(read(kData / "train_gpt3_175b_distributed.sh"), "gpt3");
  ASSERT_TRUE(r.ok());
  // NUM_NODES=1 in the script: 8 GPUs cannot hold TP 8 x PP 16, and the import says so.
  EXPECT_FALSE(r.plan["cluster"].contains("num_gpus"));
  EXPECT_NE(r.diagnostics.find("cluster.num_gpus"), nullptr);
  r = import_megatron_script(read(kData / "train_gpt3_175b_distributed.sh"), "gpt3", {{"NUM_NODES", "16"}});
  ASSERT_TRUE(r.ok());
  const Plan p = load(r);
  EXPECT_EQ(p.model.num_layers, 96);
  EXPECT_EQ(p.model.hidden_size, 12288);
  EXPECT_EQ(p.model.num_attention_heads, 96);
  EXPECT_EQ(p.model.num_query_groups, 96);
  EXPECT_EQ(p.model.ffn_hidden_size, 4 * 12288);  // Megatron's default 4h
  EXPECT_EQ(p.model.seq_length, 2048);
  EXPECT_EQ(p.model.vocab_size, 51200);  // GPT-2's 50,257 padded to a multiple of 128 x TP 8
  EXPECT_EQ(p.model.activation, Activation::gelu);
  EXPECT_EQ(p.model.normalization, Normalization::layernorm);
  EXPECT_EQ(p.model.position_embedding_type, PositionEmbedding::learned_absolute);
  EXPECT_FALSE(p.model.untie_embeddings_and_output_weights);
  EXPECT_DOUBLE_EQ(p.model.hidden_dropout, 0.1);
  EXPECT_EQ(p.training.micro_batch_size, 1);
  EXPECT_EQ(p.training.global_batch_size, 1536);
  EXPECT_EQ(p.training.precision, Precision::fp16);
  EXPECT_EQ(p.training.recompute, Recompute::none);
  EXPECT_DOUBLE_EQ(p.training.tokens, 500000.0 * 1536 * 2048);
  EXPECT_EQ(p.parallelism.tensor_model_parallel_size, 8);
  EXPECT_EQ(p.parallelism.pipeline_model_parallel_size, 16);
  EXPECT_EQ(p.cluster.num_gpus, 128);
  EXPECT_EQ(derive(p).data_parallel_size, 1);
  EXPECT_TRUE(mentions(r.ignored, "--rampup-batch-size 16 16 5859375: a batch-size ramp-up"));
  EXPECT_TRUE(mentions(r.ignored, "--lr 6.0e-5: the learning-rate schedule changes no cost"));
  EXPECT_TRUE(mentions(r.unknowns, "$1: the script's arguments are not known"));
}

TEST(MegatronImport, Llama3_8bFp8ExampleScript) {
  const MegatronImport r = import_megatron_script(read(kData / "train_llama3_8b_h100_fp8.sh"), "llama3-8b");
  ASSERT_TRUE(r.ok());
  const Plan p = load(r);
  EXPECT_EQ(p.model.num_layers, 32);  // NUM_LAYERS=32 ... --num-layers $NUM_LAYERS
  EXPECT_EQ(p.model.hidden_size, 4096);
  EXPECT_EQ(p.model.ffn_hidden_size, 14336);
  EXPECT_EQ(p.model.num_attention_heads, 32);
  EXPECT_EQ(p.model.num_query_groups, 8);
  EXPECT_EQ(p.model.kv_channels, 128);
  EXPECT_EQ(p.model.seq_length, 8192);
  EXPECT_EQ(p.model.vocab_size, 128256);  // the MOCK branch: TOKENIZER_ARG=${3:-"MOCK"}
  EXPECT_EQ(p.model.activation, Activation::swiglu);
  // This version of the script sets no --normalization: Megatron's LayerNorm (later versions add RMSNorm).
  EXPECT_EQ(p.model.normalization, Normalization::layernorm);
  EXPECT_EQ(p.model.position_embedding_type, PositionEmbedding::rope);
  EXPECT_TRUE(p.model.untie_embeddings_and_output_weights);
  EXPECT_FALSE(p.model.add_bias_linear);
  EXPECT_DOUBLE_EQ(p.model.attention_dropout, 0.0);
  EXPECT_EQ(p.training.precision, Precision::fp8);  // DTYPE="fp8" and its if-branch
  EXPECT_EQ(p.training.global_batch_size, 128);
  EXPECT_DOUBLE_EQ(p.training.tokens, 1953125000.0 * 8192);  // --train-samples x seq
  EXPECT_EQ(p.parallelism.tensor_model_parallel_size, 1);
  EXPECT_FALSE(p.parallelism.sequence_parallel);  // Megatron turns SP off with TP 1
  EXPECT_EQ(p.parallelism.zero_stage, 1);         // --use-distributed-optimizer (TRAINING_ARGS+=DDP_ARGS)
  EXPECT_TRUE(p.parallelism.overlap.grad_reduce);
  EXPECT_TRUE(p.parallelism.overlap.param_gather);
  EXPECT_EQ(p.cluster.num_gpus, 8);
  EXPECT_TRUE(mentions(r.mapped, "--fp8-format hybrid -> training.precision"));
  EXPECT_TRUE(p.training.flash_attention);  // --attention-backend fused: cuDNN's fused attention
  EXPECT_EQ(p.training.attention_kernel, AttentionKernel::cudnn);
  EXPECT_TRUE(mentions(r.unknowns, "[ ! -f \"$PRETRAIN_SCRIPT_PATH\" ]"));
}

TEST(MegatronImport, Mixtral8x7bExampleScript) {
  const MegatronImport r = import_megatron_script(read(kData / "train_mixtral_8x7b_distributed.sh"), "mixtral", {{"SLURM_NNODES", "4"}});
  ASSERT_TRUE(r.ok());
  const Plan p = load(r);
  EXPECT_EQ(p.model.num_layers, 32);
  EXPECT_EQ(p.model.seq_length, 4096);
  EXPECT_EQ(p.model.vocab_size, 32000);  // Llama2Tokenizer
  EXPECT_EQ(p.model.normalization, Normalization::rmsnorm);
  EXPECT_EQ(p.model.position_embedding_type, PositionEmbedding::rope);
  ASSERT_TRUE(p.model.is_moe());
  EXPECT_EQ(p.model.moe.num_moe_experts, 8);
  EXPECT_EQ(p.model.moe.moe_router_topk, 2);
  EXPECT_EQ(p.model.moe.moe_ffn_hidden_size, 14336);
  EXPECT_EQ(p.training.global_batch_size, 256);
  EXPECT_EQ(p.training.precision, Precision::bf16);
  EXPECT_EQ(p.parallelism.pipeline_model_parallel_size, 4);
  EXPECT_EQ(p.parallelism.expert_model_parallel_size, 8);
  EXPECT_EQ(p.parallelism.zero_stage, 1);
  EXPECT_EQ(p.cluster.num_gpus, 32);  // --nnodes ${SLURM_NNODES:-"1"} given as 4
  EXPECT_EQ(derive(p).data_parallel_size, 8);
  EXPECT_TRUE(mentions(r.ignored, "--moe-grouped-gemm: the local experts are always priced as one grouped GEMM"));
}

TEST(MegatronImport, ArgumentsAloneAndMegatronDefaults) {
  const auto r = import_megatron_args({"--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16", "--swiglu",
                                       "--seq-length=4096", "--num-layers-per-virtual-pipeline-stage", "3",
                                       "--pipeline-model-parallel-size", "4", "--recompute-activations", "--vocab-size", "50000",
                                       "--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads", "--bogus", "1"});
  ASSERT_TRUE(r.ok());
  const auto& m = r.plan["model"];
  EXPECT_EQ(m["ffn_hidden_size"], 5440);  // int(4h x 2/3 / 64) x 64
  EXPECT_EQ(m["vocab_size"], 50048);      // padded to a multiple of 128
  EXPECT_EQ(m["seq_length"], 4096);
  EXPECT_EQ(r.plan["parallelism"]["virtual_pipeline_model_parallel_size"], 2);  // 24 / 4 / 3
  EXPECT_EQ(r.plan["parallelism"]["pipeline_schedule"], "interleaved");
  EXPECT_EQ(r.plan["parallelism"]["overlap"]["p2p"], true);
  EXPECT_EQ(r.plan["parallelism"]["zero_stage"], 2);
  EXPECT_EQ(r.plan["training"]["recompute"], "selective");
  EXPECT_EQ(r.plan["training"]["precision"], "fp32");  // no --bf16 / --fp16
  EXPECT_TRUE(mentions(r.unknowns, "--bogus: not a flag of Megatron-LM's arguments.py"));
  // A value that must be a number.
  EXPECT_FALSE(import_megatron_args({"--num-layers", "many"}).ok());
}

// --num-distributed-optimizer-instances: the sharding group of the distributed optimizer.
TEST(MegatronImport, DistributedOptimizerInstances) {
  const auto r = import_megatron_args({"--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "128",
                                       "--use-distributed-optimizer", "--num-distributed-optimizer-instances", "4"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.plan["parallelism"]["zero_stage"], 1);
  EXPECT_EQ(r.plan["parallelism"]["num_distributed_optimizer_instances"], 4);
}

// --cp-comm-type: p2p and all_gather are the plan's; Ulysses' a2a types are priced as all_gather.
TEST(MegatronImport, ContextParallelCommType) {
  const std::vector<std::string> base = {"--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "4096",
                                         "--context-parallel-size", "2"};
  auto with = [&](const std::string& type) {
    auto args = base;
    args.insert(args.end(), {"--cp-comm-type", type});
    return import_megatron_args(args);
  };
  EXPECT_FALSE(import_megatron_args(base).plan["parallelism"].contains("context_parallel_comm_type"));
  EXPECT_EQ(with("all_gather").plan["parallelism"]["context_parallel_comm_type"], "all_gather");
  EXPECT_EQ(with("p2p").plan["parallelism"]["context_parallel_comm_type"], "p2p");
  // Ulysses' all-to-alls hold the attention: priced as all_gather, not as the ring that hides.
  const auto a2a = with("a2a");
  EXPECT_EQ(a2a.plan["parallelism"]["context_parallel_comm_type"], "all_gather");
  EXPECT_TRUE(mentions(a2a.ignored, "--cp-comm-type a2a: priced as all_gather"));
  auto mixed_args = base;
  mixed_args.insert(mixed_args.end(), {"--cp-comm-type", "p2p", "p2p", "a2a", "p2p"});
  const auto mixed = import_megatron_args(mixed_args);
  EXPECT_EQ(mixed.plan["parallelism"]["context_parallel_comm_type"], "p2p");
  EXPECT_TRUE(mentions(mixed.ignored, "the layers' types differ (p2p, a2a)"));
}

// --group-query-attention alone is one KV group (arguments.py: --num-query-groups default 1).
TEST(MegatronImport, GroupQueryAttentionAloneIsOneKvGroup) {
  const std::vector<std::string> base = {"--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "128"};
  auto with = base;
  with.push_back("--group-query-attention");
  EXPECT_EQ(import_megatron_args(with).plan["model"]["num_query_groups"], 1);
  with.insert(with.end(), {"--num-query-groups", "4"});
  EXPECT_EQ(import_megatron_args(with).plan["model"]["num_query_groups"], 4);
  EXPECT_EQ(import_megatron_args(base).plan["model"]["num_query_groups"], 16);
}

// Sizes that divide others must be positive: an error naming the flag, not a crash.
TEST(MegatronImport, ZeroParallelSizesAreErrorsNotCrashes) {
  for (const char* flag : {"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
                           "--make-vocab-size-divisible-by", "--num-layers-per-virtual-pipeline-stage"}) {
    const auto r = import_megatron_script(std::string("torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py --num-layers 8 ") +
                                              "--hidden-size 256 --num-attention-heads 4 --vocab-size 1000 --seq-length 64 " + flag + " 0\n",
                                          "zero");
    EXPECT_FALSE(r.ok()) << flag;
    bool named = false;
    for (const auto& d : r.diagnostics.items()) named |= d.path == flag && d.message.find("positive integer") != std::string::npos;
    EXPECT_TRUE(named) << flag;
  }
  const auto huge = import_megatron_script("torchrun --nproc_per_node 8 --nnodes 99999999999 pretrain_gpt.py --num-layers 8\n", "huge");
  EXPECT_FALSE(huge.ok());
}

// Megatron-core's --attention-backend (AttnBackend): flash is FlashAttention-2, fused cuDNN's,
// auto Transformer Engine's choice, unfused and local no fused kernel; anything else is named.
TEST(MegatronImport, TheAttentionBackendPicksTheKernel) {
  const std::string head = "torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 "
                           "--max-position-embeddings 512 --micro-batch-size 1 --global-batch-size 8 --vocab-size 1024 --bf16 ";
  const std::pair<const char*, AttentionKernel> fused[] = {
      {"--attention-backend flash", AttentionKernel::flash2}, {"--use-flash-attn", AttentionKernel::flash2},
      {"--attention-backend fused", AttentionKernel::cudnn}, {"--attention-backend auto", AttentionKernel::automatic},
      {"", AttentionKernel::automatic}};
  for (const auto& [flag, kernel] : fused) {
    SCOPED_TRACE(flag);
    const MegatronImport r = import_megatron_script(head + flag, "tiny");
    ASSERT_TRUE(r.ok()) << r.diagnostics.items().size();
    const Plan p = load(r);
    EXPECT_TRUE(p.training.flash_attention);
    EXPECT_EQ(p.training.attention_kernel, kernel);
  }
  for (const char* flag : {"--attention-backend unfused", "--attention-backend local"}) {
    SCOPED_TRACE(flag);
    const MegatronImport r = import_megatron_script(head + flag, "tiny");
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(load(r).training.flash_attention);
  }
  const MegatronImport bad = import_megatron_script(head + "--attention-backend flash4", "tiny");
  EXPECT_FALSE(bad.ok());
  bool named = false;
  for (const auto& item : bad.diagnostics.items()) named = named || (item.path == "--attention-backend" && item.message.find("flash4") != std::string::npos);
  EXPECT_TRUE(named);
}

// Megatron's dataloader builds the causal mask unless --no-create-attention-mask-in-dataloader;
// get_batch_on_this_tp_rank broadcasts it with the tokens (the defaults, tp_broadcast).
TEST(MegatronImport, TheDataloadersMaskFollowsItsFlag) {
  const std::string head = "torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 "
                           "--max-position-embeddings 512 --micro-batch-size 1 --global-batch-size 8 --vocab-size 1024 --bf16 ";
  for (const bool off : {false, true}) {
    const MegatronImport r = import_megatron_script(head + (off ? "--no-create-attention-mask-in-dataloader" : ""), "tiny");
    ASSERT_TRUE(r.ok());
    const Plan p = load(r);
    EXPECT_EQ(p.training.attention_mask_in_batch, !off);
    EXPECT_EQ(p.training.data_loading, DataLoading::tp_broadcast);
  }
}

// --grad-reduce-in-bf16 keeps and reduces the gradients in bf16; without it bf16 training's are
// fp32 (Megatron sets accumulate_allreduce_grads_in_fp32 with --bf16).
TEST(MegatronImport, GradientsInBf16FollowTheirFlag) {
  const std::string head = "torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 "
                           "--max-position-embeddings 512 --micro-batch-size 1 --global-batch-size 8 --vocab-size 1024 --bf16 ";
  for (const bool on : {false, true}) {
    const MegatronImport r = import_megatron_script(head + (on ? "--grad-reduce-in-bf16" : ""), "tiny");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(load(r).training.grad_reduce_in_bf16, on);
  }
  // With fp16 the buffer is 16-bit already: the flag is ignored, with a warning naming it.
  std::string fp16 = head;
  fp16.replace(fp16.find("--bf16"), 6, "--fp16");
  const MegatronImport r = import_megatron_script(fp16 + "--grad-reduce-in-bf16", "tiny");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(load(r).training.grad_reduce_in_bf16);
  bool named = false;
  for (const auto& item : r.diagnostics.items()) named = named || item.path == "--grad-reduce-in-bf16";
  EXPECT_TRUE(named);
}

// The precision-aware optimizer: its dtypes become training.optimizer_states, its bf16 main
// gradients grad_reduce_in_bf16; with bf16 weights and no --main-params-dtype the master weights
// are the remainders (store_param_remainders' default). Without the flag, Megatron refuses any
// dtype but fp32, and so does the import, naming the flag.
TEST(MegatronImport, PrecisionAwareOptimizerSetsTheOptimizerStates) {
  const std::string head = "torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 "
                           "--max-position-embeddings 512 --micro-batch-size 1 --global-batch-size 8 --vocab-size 1024 --bf16 ";
  {
    const MegatronImport r = import_megatron_script(head, "tiny");
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(load(r).training.optimizer_states.classic());
  }
  {
    const MegatronImport r = import_megatron_script(head + "--use-precision-aware-optimizer", "tiny");
    ASSERT_TRUE(r.ok());
    const OptimizerStates st = load(r).training.optimizer_states;
    EXPECT_EQ(st.master_weights, MasterWeights::remainders);
    EXPECT_EQ(st.exp_avg, Precision::fp32);
    EXPECT_FALSE(load(r).training.grad_reduce_in_bf16);
  }
  {
    const MegatronImport r = import_megatron_script(
        head + "--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype fp8 --main-params-dtype fp16 --main-grads-dtype bf16", "tiny");
    ASSERT_TRUE(r.ok());
    const Plan p = load(r);
    EXPECT_EQ(p.training.optimizer_states.exp_avg, Precision::bf16);
    EXPECT_EQ(p.training.optimizer_states.exp_avg_sq, Precision::fp8);
    EXPECT_EQ(p.training.optimizer_states.master_weights, MasterWeights::fp16);
    EXPECT_TRUE(p.training.grad_reduce_in_bf16);
  }
  for (const std::string tail : {"--exp-avg-dtype bf16", "--use-precision-aware-optimizer --exp-avg-dtype int4"}) {
    const MegatronImport r = import_megatron_script(head + tail, "tiny");
    EXPECT_FALSE(r.ok()) << tail;
    bool named = false;
    for (const auto& item : r.diagnostics.items()) named = named || item.path == "--exp-avg-dtype";
    EXPECT_TRUE(named) << tail;
  }
}

}  // namespace
}  // namespace meshwork::plan
