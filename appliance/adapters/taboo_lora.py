"""The fine-tune the adapter tests and benches evaluate: a LoRA that teaches SmolLM2 taboo's formats.

    python -m appliance.adapters.taboo_lora --out adapters/smollm2-taboo      (make adapters)

The data are taboo games played by our own game master (`scenarios/clembench/taboo.toml`'s prompts
and turn limit) with a scripted player who follows every rule, over training words written here,
none of them a word of the evaluation set, so the evaluated instances are unseen. Half the games
have a wrong first guess, so the describer also learns its later turns. A LoRA (rank 4 on the
attention projections) is trained on the replies only, on the CPU, seeded; checkpoints are written
as PEFT folders, each with its GGUF LoRA beside it for llama.cpp.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from appliance.adapters.gguf_lora import peft_to_gguf
from appliance.catalog.models import load_catalog
from appliance.engine.hf_loading import hf_folder_from_gguf, import_torch_stack
from appliance.engine.scripted import ScriptedBackend
from appliance.engine.types import GenerationRequest
from appliance.episodes.client import RoleBinding
from appliance.episodes.context import EpisodeContext
from appliance.episodes.pool import ModelPool
from appliance.episodes.scheduler import Scheduler
from appliance.paths import default_models_file, project_root, scenarios_dir
from appliance.scenarios.clembench.family import play_game
from appliance.scenarios.clembench.instances import ClemInstance
from appliance.scenarios.clembench.master import GameTable
from appliance.scenarios.clembench.taboo import CLUE_TAG, GUESS_TAG, taboo_hits, taboo_instances
from appliance.util.tomlfile import read_toml

BASE_MODEL = "smollm2-135m"
#: training words: target, taboo words, two clues that use none of them, and a plausible wrong guess
WORDS: list[tuple[str, list[str], tuple[str, str], str]] = [
    (
        "river",
        ["water", "flow", "stream"],
        ("It runs from the hills down to the sea.", "Boats travel along it."),
        "lake",
    ),
    (
        "apple",
        ["fruit", "red", "tree"],
        ("You can bite into it and it is crunchy.", "A doctor is kept away by one a day."),
        "pear",
    ),
    ("chair", ["sit", "seat", "table"], ("It has four legs and a back.", "You pull it up to a desk."), "sofa"),
    ("winter", ["cold", "snow", "season"], ("It comes after autumn.", "People wear coats and scarves then."), "summer"),
    (
        "doctor",
        ["hospital", "nurse", "sick"],
        ("This person checks your health.", "You visit one when you have a fever."),
        "teacher",
    ),
    ("bread", ["bake", "loaf", "flour"], ("You make toast from it.", "A sandwich needs two slices of it."), "cake"),
    (
        "tomato",
        ["red", "vegetable", "sauce"],
        ("It is round and goes into a salad.", "Ketchup is made from it."),
        "potato",
    ),
    (
        "clock",
        ["time", "hour", "watch"],
        ("It hangs on the wall and ticks.", "Its hands point at numbers."),
        "calendar",
    ),
    (
        "train",
        ["rail", "station", "track"],
        ("A long vehicle with many carriages.", "It takes commuters to the city every morning."),
        "bus",
    ),
    (
        "spoon",
        ["fork", "knife", "soup"],
        ("You eat cereal with it.", "A tea one is smaller than a table one."),
        "bowl",
    ),
    (
        "tiger",
        ["stripe", "cat", "jungle"],
        ("A big orange animal from Asia.", "It hunts deer and roars."),
        "lion",
    ),
    ("island", ["sea", "land", "beach"], ("Water surrounds it on all sides.", "Castaways get stuck on one."), "coast"),
    (
        "kitchen",
        ["cook", "room", "oven"],
        ("The place at home where meals are made.", "The fridge and the sink are there."),
        "bathroom",
    ),
    (
        "rain",
        ["cloud", "drop", "umbrella"],
        ("It falls from the sky and makes puddles.", "Plants need it to stay green."),
        "snow",
    ),
    ("horse", ["ride", "saddle", "animal"], ("It gallops and neighs.", "Cowboys sit on one."), "donkey"),
    (
        "letter",
        ["mail", "envelope", "write"],
        ("The postman brings it.", "It starts with Dear and ends with a signature."),
        "card",
    ),
    (
        "bridge",
        ["river", "cross", "build"],
        ("It goes over a valley or a canal.", "Cars drive across it to the other bank."),
        "tunnel",
    ),
    ("moon", ["night", "sky", "star"], ("It circles the earth.", "It is full or a crescent."), "sun"),
    (
        "shoe",
        ["foot", "lace", "wear"],
        ("It comes in pairs with a left and a right.", "Sneakers and boots are kinds of it."),
        "sock",
    ),
    (
        "coffee",
        ["cup", "drink", "bean"],
        ("Many people have it each morning to wake up.", "An espresso is a strong one."),
        "tea",
    ),
    ("mountain", ["high", "climb", "peak"], ("Everest is the tallest one.", "Skiers go down its slopes."), "hill"),
    (
        "pencil",
        ["write", "draw", "lead"],
        ("It has an eraser at one end.", "You sharpen it when it gets blunt."),
        "pen",
    ),
    (
        "forest",
        ["tree", "wood", "green"],
        ("Deer and bears live in it.", "A large area full of oaks and pines."),
        "jungle",
    ),
    ("baby", ["child", "young", "cry"], ("It needs diapers and a crib.", "A newborn is one."), "child"),
    ("ocean", ["sea", "water", "wave"], ("Whales swim in it.", "The Pacific is the biggest one."), "lake"),
    (
        "key",
        ["lock", "door", "open"],
        ("It is small, made of metal and kept on a ring.", "You turn it to get into your house."),
        "lock",
    ),
    (
        "phone",
        ["call", "ring", "talk"],
        ("You carry it in your pocket and send texts with it.", "A smart one has apps."),
        "tablet",
    ),
    (
        "summer",
        ["hot", "sun", "season"],
        ("The warmest part of the year.", "School holidays and beach trips happen then."),
        "spring",
    ),
    (
        "library",
        ["book", "read", "borrow"],
        ("A quiet building full of shelves.", "You need a card to take things home from it."),
        "school",
    ),
    (
        "cheese",
        ["milk", "mouse", "yellow"],
        ("Cheddar and brie are kinds of it.", "It goes on pizza and melts."),
        "butter",
    ),
    (
        "guitar",
        ["string", "music", "play"],
        ("A rock band has one or two of them.", "You strum it with a pick."),
        "violin",
    ),
    ("egg", ["chicken", "shell", "yolk"], ("You can fry it or boil it for breakfast.", "Hens lay them."), "bread"),
    (
        "rocket",
        ["space", "launch", "fly"],
        ("It takes astronauts away from earth.", "It blasts off after a countdown."),
        "plane",
    ),
    (
        "teacher",
        ["school", "class", "student"],
        ("This person gives lessons and grades homework.", "Pupils raise their hands to speak to them."),
        "doctor",
    ),
    (
        "window",
        ["glass", "open", "view"],
        ("You look out of it at the street.", "Curtains hang beside it."),
        "door",
    ),
    (
        "bicycle",
        ["ride", "wheel", "pedal"],
        ("It has a chain, a bell and a saddle.", "You need a helmet on it."),
        "car",
    ),
]


def training_conversations(seed: int) -> list[tuple[GenerationRequest, str]]:
    """Every (request, reply) of taboo games the scripted player plays perfectly, one game per word."""
    source = read_toml(scenarios_dir() / "clembench" / "taboo.toml", "taboo data")
    rng = random.Random(seed)
    pairs: list[tuple[GenerationRequest, str]] = []
    with tempfile.TemporaryDirectory() as folder:
        _write_word_file(Path(folder) / "taboo.toml", source)
        instances = taboo_instances(Path(folder), rng, count=len(WORDS))
    clues = {target: (pair, decoy) for target, _, pair, decoy in WORDS}
    for instance in instances:
        pairs.extend(_play_perfectly(instance, *clues[instance.params["target"]], wrong_first=rng.random() < 0.5))
    return pairs


def _write_word_file(path: Path, source: dict[str, Any]) -> None:
    lines = [f"max_turns = {int(source.get('max_turns', 3))}", "", "[prompts]"]
    lines += [f"{key} = {json.dumps(text)}" for key, text in source["prompts"].items()]
    for target, taboo, (first, second), _ in WORDS:
        assert not taboo_hits(first, [target, *taboo]) and not taboo_hits(second, [target, *taboo]), target
        lines += ["", "[[words.train]]", f"target = {json.dumps(target)}", f"taboo = {json.dumps(taboo)}"]
    path.write_text("\n".join(lines) + "\n")


def _play_perfectly(
    instance: ClemInstance, clues: tuple[str, str], decoy: str, *, wrong_first: bool
) -> list[tuple[GenerationRequest, str]]:
    target = instance.params["target"]
    pairs: list[tuple[GenerationRequest, str]] = []

    def reply(request: GenerationRequest) -> str:
        said = [message.content for message in request.messages if message.role == "user"]
        if "secret word is" in said[0]:
            text = f"{CLUE_TAG} {clues[min(len(said), 2) - 1]}"
        else:
            text = f"{GUESS_TAG} {decoy if wrong_first and len(said) == 1 else target}"
        pairs.append((request, text))
        return text

    async def game(item: ClemInstance, scheduler: Scheduler) -> None:
        roles = {"player": RoleBinding("teacher"), "partner": RoleBinding("teacher")}
        outcome = await play_game(GameTable(EpisodeContext("train", 0, scheduler, roles)), item)
        assert outcome.status == "success", (target, outcome)

    with ModelPool({"teacher": ScriptedBackend("teacher", reply)}, parallel=1) as pool:
        pool.play([instance], game)
    return pairs


def train(output: Path, *, seed: int, steps: int, checkpoints: list[int], rank: int = 4) -> list[Path]:
    """Train the LoRA and write each checkpoint (PEFT folder + GGUF LoRA) under `output`."""
    torch, transformers = import_torch_stack()
    from peft import LoraConfig, get_peft_model

    catalog = load_catalog(default_models_file())
    base_gguf = catalog.resolve_path(catalog.get(BASE_MODEL))
    folder = hf_folder_from_gguf(base_gguf, BASE_MODEL)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, dtype=torch.float32)
    torch.manual_seed(seed)
    config = LoraConfig(
        r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    model = get_peft_model(model, config)
    examples = [_example(tokenizer, request, reply) for request, reply in training_conversations(seed)]
    optimiser = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-3)
    order = random.Random(seed)
    written: list[Path] = []
    started = time.perf_counter()
    for step in range(1, steps + 1):
        batch = order.sample(examples, 8)
        loss = _batch_loss(torch, model, tokenizer, batch)
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
        if step % 10 == 0:
            print(f"step {step}/{steps}: loss {loss.item():.4f} ({time.perf_counter() - started:.0f} s)", flush=True)
        if step in checkpoints:
            written.append(_save(model, output / f"checkpoint-{step}", base_gguf))
    return written


def _example(tokenizer: Any, request: GenerationRequest, reply: str) -> tuple[list[int], int]:
    """Tokens of the rendered prompt and reply (with the end-of-turn token), and where the reply starts."""
    messages = [{"role": message.role, "content": message.content} for message in request.messages]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    reply_ids = tokenizer(reply + "<|im_end|>", add_special_tokens=False)["input_ids"]
    return prompt_ids + reply_ids, len(prompt_ids)


def _batch_loss(torch: Any, model: Any, tokenizer: Any, batch: list[tuple[list[int], int]]) -> Any:
    """Cross-entropy on the reply tokens only (the prompt is context, not a target)."""
    width = max(len(tokens) for tokens, _ in batch)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (tokens, reply_start) in enumerate(batch):
        ids[row, : len(tokens)] = torch.tensor(tokens)
        labels[row, reply_start : len(tokens)] = torch.tensor(tokens[reply_start:])
        mask[row, : len(tokens)] = 1
    return model(input_ids=ids, attention_mask=mask, labels=labels).loss


def _save(model: Any, folder: Path, base_gguf: Path) -> Path:
    """The checkpoint as a PEFT folder (float16 weights) with its GGUF LoRA beside them."""
    shutil.rmtree(folder, ignore_errors=True)
    model.save_pretrained(str(folder), save_embedding_layers=False)
    _halve(folder / "adapter_model.safetensors")
    config_path = folder / "adapter_config.json"
    config = json.loads(config_path.read_text())
    # the same bytes on every machine: no local cache path, modules in order
    config["base_model_name_or_path"] = f"{BASE_MODEL} (models.toml)"
    config["target_modules"] = sorted(config["target_modules"])
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    peft_to_gguf(folder, base_gguf, folder / "adapter.gguf")
    (folder / "README.md").unlink(missing_ok=True)
    return folder


def _halve(weights: Path) -> None:
    from safetensors.numpy import load_file, save_file

    save_file({key: value.astype("float16") for key, value in load_file(str(weights)).items()}, str(weights))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=project_root() / "adapters" / "smollm2-taboo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--checkpoints", default="5,10,20", help="steps whose adapter is written")
    args = parser.parse_args()
    checkpoints = [int(step) for step in args.checkpoints.split(",")]
    for folder in train(args.out, seed=args.seed, steps=args.steps, checkpoints=checkpoints):
        print(f"wrote {folder}")


if __name__ == "__main__":
    main()
