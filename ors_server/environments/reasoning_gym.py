"""reasoning-gym's procedural datasets as environments: `--env reasoning-gym:SELECTION[?OPTIONS]`.

`pip install "ors-server[reasoning-gym]"` brings the library; it is imported only when a spec names it.

    reasoning-gym:chain_sum,leg_counting     one environment per dataset, named as the dataset
    reasoning-gym:all                        every dataset of the library (composite excepted)
    reasoning-gym:arith=chain_sum:2,products one environment `arith`: a weighted mixture (weight 1 if left out)
    reasoning-gym:mix.yaml                   a mixture from a file in reasoning-gym's composite format (or JSON)
    ...?size=500&seed=7&min_terms=3          options: split sizes and seeds, and the datasets' config fields

Each environment has a `train` split (`size` tasks, default 1000, from `seed`, default 0) and a `test` split
(`test_size`, default 100, from `test_seed`, default `seed` + 10**9). reasoning-gym draws item i of a dataset made
with seed s from seed s + i, so splits whose seed ranges overlap share items: that is refused at startup. A task
spec is `{"split", "index"}` (the split's item `index`) or `{"seed"}` (item 0 of the dataset made with that seed:
what `task_from_seed` gives for a seed alone). The prompt is the dataset's question; `submit(answer)` is scored
by the dataset's own `score_answer`, and ends the episode.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qsl

from pydantic import BaseModel, Field, StrictFloat, StrictInt, StrictStr

from ors_server import (
    Environment,
    GroupCandidate,
    GroupScore,
    InvalidTaskSpec,
    Split,
    TextBlock,
    ToolOutput,
    terminal,
    tool,
)

PREFIX = "reasoning-gym:"
INSTALL_HINT = "reasoning-gym is not installed: pip install 'ors-server[reasoning-gym]'"
DEFAULT_SIZE = 1000
DEFAULT_TEST_SIZE = 100
DEFAULT_SEED = 0
TEST_SEED_OFFSET = 10**9
SEEDED_DATASETS_KEPT = 32
"""Datasets made for `{"seed"}` tasks that each environment keeps for reuse (least recently used dropped)."""

HASH_ORDERED = frozenset(
    {"isomorphic_strings", "knight_swap", "polynomial_multiplication", "ransom_note", "word_ladder"}
)
"""Datasets whose items depend on the order of a set of strings, so on the process's hash seed (found with
reasoning-gym 0.1.25): they repeat across restarts and workers only with `PYTHONHASHSEED` set."""

SUBMIT_HINT = "Give your final answer with the `submit` tool (one call; it ends the episode)."
SPLIT_OPTIONS = ("size", "test_size", "seed", "test_seed")
FILE_SUFFIXES = (".yaml", ".yml", ".json")
ENV_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")  # it becomes a URL path segment


def _library() -> Any:
    """`reasoning_gym.factory`, imported on first use (the import alone takes seconds)."""
    try:
        import reasoning_gym  # noqa: F401  (registers every dataset)
        from reasoning_gym import factory
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] == "reasoning_gym":
            raise ValueError(INSTALL_HINT) from None
        raise ValueError(f"importing reasoning-gym failed: {type(exc).__name__}: {exc}") from None
    return factory


@dataclass(frozen=True)
class Part:
    """One dataset of an environment, with its weight in a mixture and its config fields."""

    dataset: str
    weight: float = 1.0
    config: dict[str, Any] = field(default_factory=dict)


class Source:
    """The datasets one environment serves tasks from: one per split, made on first use, and a few per seed.

    reasoning-gym datasets make items on demand and are not documented as thread-safe, so items are made under
    one lock per environment (the work is CPU-bound; the GIL would serialise it anyway). Scoring runs outside it.
    """

    def __init__(self, parts: list[Part], mixture: bool, sizes: dict[str, int], seeds: dict[str, int]) -> None:
        self.parts, self.mixture, self.sizes, self.seeds = parts, mixture, sizes, seeds
        self._lock = threading.Lock()
        self._splits: dict[str, Any] = {}
        self._seeded: OrderedDict[int, Any] = OrderedDict()

    def make(self, size: int, seed: int) -> Any:
        factory = _library()
        if not self.mixture:
            part = self.parts[0]
            return factory.create_dataset(part.dataset, **part.config, size=size, seed=seed)
        from reasoning_gym.composite import DatasetSpec

        specs = [DatasetSpec(name=p.dataset, weight=p.weight, config=dict(p.config)) for p in self.parts]
        return factory.create_dataset("composite", size=size, seed=seed, datasets=specs)

    def entry(self, task_spec: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The dataset and its item that `task_spec` names."""
        with self._lock:
            if set(task_spec) == {"split", "index"} and task_spec["split"] in self.sizes:
                split, index = task_spec["split"], task_spec["index"]
                if _is_int(index):
                    if not 0 <= index < self.sizes[split]:
                        last = self.sizes[split] - 1
                        raise InvalidTaskSpec(f"task index {index} is outside split '{split}' (0 to {last})")
                    if split not in self._splits:
                        self._splits[split] = self.make(self.sizes[split], self.seeds[split])
                    return self._splits[split], self._splits[split][index]
            if set(task_spec) == {"seed"} and _is_int(task_spec["seed"]) and task_spec["seed"] >= 0:
                seed: int = task_spec["seed"]
                if seed in self._seeded:
                    self._seeded.move_to_end(seed)
                else:
                    self._seeded[seed] = self.make(1, seed)
                    if len(self._seeded) > SEEDED_DATASETS_KEPT:
                        self._seeded.popitem(last=False)
                return self._seeded[seed], self._seeded[seed][0]
        splits = " or ".join(f"'{name}'" for name in self.sizes)
        raise InvalidTaskSpec(
            f'a reasoning-gym task spec is {{"split": {splits}, "index": N}} or {{"seed": N}} (N >= 0), '
            f"not {json.dumps(task_spec)[:200]}"
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class SubmitInput(BaseModel):
    # A JSON number is read as its text: the scorers compare strings.
    answer: StrictStr | StrictInt | StrictFloat = Field(description="Your final answer, in the form the task asks for")


class ReasoningGymEnvironment(Environment):
    """The base of every reasoning-gym environment; `environments_for` makes one subclass per environment."""

    source: ClassVar[Source]

    @classmethod
    def list_splits(cls) -> list[str | Split]:
        return ["train", "test"]

    @classmethod
    def num_tasks(cls, split: str) -> int:
        return cls.source.sizes[split]

    @classmethod
    def get_task(cls, split: str, index: int) -> dict[str, Any]:
        if not 0 <= index < cls.source.sizes[split]:
            raise IndexError(index)
        return {"split": split, "index": index}

    @classmethod
    def get_task_range(cls, split: str, start: int | None, stop: int | None) -> list[dict[str, Any]]:
        return [{"split": split, "index": i} for i in range(*slice(start, stop).indices(cls.source.sizes[split]))]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return cls.get_task_range(split, None, None)

    @classmethod
    def task_from_seed(cls, seed: int | None, config: dict[str, Any]) -> dict[str, Any]:
        """A seed alone names the item the dataset made with that seed starts with: `{"seed": seed}`, beyond
        the listed splits. With a `task_spec`, an `index` or a `split` in `config`, tasks go as for any
        environment (a seed picks task `seed % size` of the split)."""
        if seed is None or any(key in config for key in ("task_spec", "index", "split")):
            return super().task_from_seed(seed, config)
        return {"seed": seed}

    def setup(self) -> None:
        self._dataset, self._entry = self.source.entry(self.task_spec)

    def _item(self) -> tuple[Any, dict[str, Any]]:
        if not hasattr(self, "_entry"):  # setup() runs first in a session; this serves direct use too
            self.setup()
        return self._dataset, self._entry

    def get_prompt(self) -> list[TextBlock]:
        _, entry = self._item()
        return [TextBlock(text=f"{entry['question']}\n\n{SUBMIT_HINT}")]

    @terminal
    @tool
    def submit(self, params: SubmitInput) -> ToolOutput:
        """Submit your final answer. Ends the episode; the reward is the dataset's own score of it, 0 to 1."""
        reward, unreadable = self._score(str(params.answer))
        if unreadable is not None:
            return ToolOutput(
                blocks=[TextBlock(text=f"Wrong (the answer could not be read: {unreadable})")],
                reward=0.0,
                finished=True,
            )
        text = "Correct!" if reward == 1.0 else "Wrong" if reward == 0.0 else "Partly right"
        return ToolOutput(blocks=[TextBlock(text=text)], reward=reward, finished=True)

    def score_group(self, candidates: Sequence[GroupCandidate]) -> list[GroupScore]:
        """Each candidate's final answer (its `submit` call, else its last message) scored as `submit` scores it."""
        scores = []
        for candidate in candidates:
            answer = candidate.final_answer("submit")
            scores.append(GroupScore(reward=self._score(answer)[0], metadata={"answer": answer}))
        return scores

    def _score(self, answer: str) -> tuple[float, str | None]:
        """The dataset's score of `answer` in [0, 1], and the error's type when its scorer could not read it."""
        dataset, entry = self._item()
        try:
            score = float(dataset.score_answer(answer, entry))
        except Exception as exc:
            # Some scorers parse the answer and raise on one they cannot read: that answer is wrong, not a fault.
            return 0.0, type(exc).__name__
        return (min(max(score, 0.0), 1.0) if math.isfinite(score) else 0.0), None


# Specs to environments.


def environments_for(selection: str, app_dir: str) -> list[type[ReasoningGymEnvironment]]:
    """The environments `selection` (what follows `reasoning-gym:`) names. Raises ValueError with one line."""
    selection, _, query = selection.partition("?")
    options = _options(query)
    factory = _library()
    known = sorted(name for name in factory.DATASETS if name != "composite")
    if selection.endswith(FILE_SUFFIXES):
        name, parts, options = _from_file(Path(app_dir, selection), options, known)
        return [_environment(factory, name, parts, True, options)]
    if "=" in selection:
        name, _, mixture = selection.partition("=")
        if not ENV_NAME.match(name):
            raise ValueError(f"'{name}' is no environment name (letters, digits, _ . -)")
        parts = [_part(item, known) for item in mixture.split(",")]
        return [_environment(factory, name, parts, True, options)]
    datasets = known if selection == "all" else [_known(name, known) for name in selection.split(",")]
    config = {key: value for key, value in options.items() if key not in SPLIT_OPTIONS}
    sizes = {key: value for key, value in options.items() if key in SPLIT_OPTIONS}
    return [_environment(factory, name, [Part(name, 1.0, config)], False, sizes) for name in datasets]


def _options(query: str) -> dict[str, Any]:
    if not query:
        return {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise ValueError(f"options are key=value joined by &, not '{query}'") from None
    options: dict[str, Any] = {}
    for key, text in pairs:
        try:
            options[key] = json.loads(text)  # numbers, booleans and lists as JSON; anything else a string
        except json.JSONDecodeError:
            options[key] = text
    return options


def _known(name: str, known: list[str]) -> str:
    if name in known:
        return name
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else " (reasoning-gym:all serves every one)"
    raise ValueError(f"reasoning-gym has no dataset '{name}'{hint}")


def _part(item: str, known: list[str]) -> Part:
    dataset, _, weight = item.partition(":")
    try:
        value = float(weight) if weight else 1.0
    except ValueError:
        raise ValueError(f"'{item}': a mixture is DATASET[:WEIGHT],... with a number as the weight") from None
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"'{item}': a weight must be a positive number")
    return Part(_known(dataset, known), value)


def _from_file(path: Path, options: dict[str, Any], known: list[str]) -> tuple[str, list[Part], dict[str, Any]]:
    """reasoning-gym's composite format (`size`, `seed`, `datasets: [{name, weight, config}]`), plus our `name`,
    `test_size` and `test_seed`; the spec's options win over the file's."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read the mixture file {path}: {exc.strerror}") from None
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # a parser's own error types, with a position in the message
        raise ValueError(f"{path.name} is not valid {path.suffix[1:].upper()}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("datasets"), list) or not data["datasets"]:
        raise ValueError(f"{path.name}: expected a mapping with a non-empty 'datasets' list")
    unknown = set(data) - {"name", "datasets", *SPLIT_OPTIONS}
    if unknown:
        raise ValueError(f"{path.name}: unknown keys {sorted(unknown)} (name, datasets, {', '.join(SPLIT_OPTIONS)})")
    parts = []
    for item in data["datasets"]:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ValueError(f"{path.name}: each of 'datasets' is a mapping with a 'name' (and 'weight', 'config')")
        weight, config = item.get("weight", 1.0), item.get("config") or {}
        if not isinstance(weight, int | float) or isinstance(weight, bool) or not weight > 0:
            raise ValueError(f"{path.name}: dataset '{item['name']}' needs a positive number as its weight")
        if not isinstance(config, dict):
            raise ValueError(f"{path.name}: the config of dataset '{item['name']}' is not a mapping")
        parts.append(Part(_known(item["name"], known), float(weight), config))
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not ENV_NAME.match(name):
        raise ValueError(f"{path.name}: '{name}' is no environment name (letters, digits, _ . -)")
    file_options = {key: data[key] for key in SPLIT_OPTIONS if key in data}
    return name, parts, {**file_options, **options}


def _environment(
    factory: Any, name: str, parts: list[Part], mixture: bool, options: dict[str, Any]
) -> type[ReasoningGymEnvironment]:
    config_keys = set(options) - set(SPLIT_OPTIONS)
    if config_keys:
        raise ValueError(
            f"{sorted(config_keys)}: a mixture takes only {', '.join(SPLIT_OPTIONS)} as options "
            "(give each dataset's config in a mixture file)"
        )
    for key in SPLIT_OPTIONS:
        value = options.get(key)
        if value is not None and (not _is_int(value) or value < (1 if key.endswith("size") else 0)):
            floor = 1 if key.endswith("size") else 0
            raise ValueError(f"option {key} must be an integer of at least {floor}, not {value!r}")
    size, test_size = options.get("size", DEFAULT_SIZE), options.get("test_size", DEFAULT_TEST_SIZE)
    seed = options.get("seed", DEFAULT_SEED)
    test_seed = options.get("test_seed", seed + TEST_SEED_OFFSET)
    reach = len(parts) if mixture else 0  # a mixture's k-th dataset is made with seed + k + 1
    if seed < test_seed + test_size + reach and test_seed < seed + size + reach:
        raise ValueError(
            f"the train split (seeds {seed}..{seed + size - 1}) and the test split (seeds {test_seed}.."
            f"{test_seed + test_size - 1}) would share items: item i of seed s is made from seed s + i"
        )
    for part in parts:
        _check_config(factory, part, size, seed)
    source = Source(parts, mixture, {"train": size, "test": test_size}, {"train": seed, "test": test_seed})
    namespace = {
        "name": name,
        "source": source,
        "__doc__": _description(factory, parts, mixture),
        "__module__": __name__,
    }
    return type(f"ReasoningGym_{name}", (ReasoningGymEnvironment,), namespace)


def _check_config(factory: Any, part: Part, size: int, seed: int) -> None:
    """The dataset's config fields exist and pass its own validation: checked at startup, where a mistake is
    one line, rather than at a session's first task."""
    config_cls = factory.DATASETS[part.dataset][1]
    names = {f.name for f in fields(config_cls)}
    unknown = sorted(set(part.config) - names)
    if unknown:
        settable = ", ".join(sorted(names - {"size", "seed"}))
        raise ValueError(f"dataset '{part.dataset}' has no config field {unknown} (its fields: {settable})")
    try:
        config = config_cls(**{**part.config, "size": size, "seed": seed})
        if hasattr(config, "validate"):
            config.validate()
    except Exception as exc:  # the datasets validate with assert, ValueError or TypeError
        raise ValueError(f"dataset '{part.dataset}': invalid config: {type(exc).__name__}: {exc}") from None


def _description(factory: Any, parts: list[Part], mixture: bool) -> str:
    if mixture:
        total = sum(part.weight for part in parts)
        shares = ", ".join(f"{part.dataset} {part.weight / total:.0%}" for part in parts)
        return f"reasoning-gym mixture: {shares}"
    dataset_cls = factory.DATASETS[parts[0].dataset][0]
    category = dataset_cls.__module__.split(".")[1] if dataset_cls.__module__.count(".") >= 2 else "other"
    doc = (dataset_cls.__dict__.get("__doc__") or "").strip().splitlines()
    caveat = " (repeatable across processes only with PYTHONHASHSEED set)" if parts[0].dataset in HASH_ORDERED else ""
    return f"reasoning-gym {category}: {doc[0].strip() if doc else parts[0].dataset}{caveat}"
