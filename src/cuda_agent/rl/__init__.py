"""cuda-agent's plug-ins for verl 0.9.1 (the `rl` extra: `pip install -e '.[rl]'`), in rooms by the
process that imports them.

    driver/    the `cuda-agent train` process (cli/train.py): the stages and the run file (`stages`),
               launching verl and merging its checkpoints (`launch`; its process group: `verl_process`),
               the stages in order (`train`; each stage's data and overrides: `inputs`; the scripted
               demonstrations that fill_agentic_rft runs through the harness: `fill_demos`), metrics and
               plots (`metrics`), and the stage configs verl composes (`config/`)
    tools/     run on their own (`python -m`): the tiny test model (`tiny_model`, which the driver also
               builds for `model: tiny`), SmolLM2 from its GGUF (`pretrained`), the fill family's
               held-out evaluation (`fill_eval`)
    workers/   what verl loads by name in its own processes: the plug-in every verl process imports
               (`plugin`, through VERL_USE_EXTERNAL_MODULES or the `verl.plugins` entry point), the
               single-turn reward (`reward.compute_score`), the SFT dataset (`sft_dataset`), the CPU
               platform for CI (`cpu_platform`)
    rollout/   what generates, inside verl's workers: the agent loops (`agent_loop`, listed in
               `agent_loops.yaml`) on `token_model` and `token_trajectory`, the rollouts `hf`
               (`hf`, its server `hf_server`) and `null` (`null`) that the plug-in registers, the chat
               template that shows tool calls (`chat_template`: the agent loop's token builder; the tools
               and the driver write and check it, and `python -m` writes it into a model folder), and the
               harness behind the tools and the reward (`evaluation`: the evaluation service)
    data/      what the driver writes and the workers read: rows and Parquet (`rows`, `prompts.toml`),
               the task families (`fill`, its multi-turn form `fill_agent`, `sanity` with
               `sanity_kernels/`), rejection fine-tuning's filter (`rft`)

A room imports only the rooms below it in that list (pyproject.toml's contract for the rooms): the
driver builds the tiny model and checks the reward's settings before verl starts, the tools judge
through the reward, the reward uses the rollout's evaluation service, and everything reads the data;
nothing that verl's workers load imports the driver. Names given as text are outside the contract:
the plug-in registers the rollouts by their dotted paths, and the driver checks that the agent
loops' `_target_`s import.
Nothing outside rl/ imports it but the CLI. The driver's, the tools' and the data's modules import
without verl (they import it where they use it), and so do `reward` and `evaluation`; the plug-in,
the CPU platform, the SFT dataset, the agent loop and the rollouts need it.
"""
