"""Regenerate the pinned field lists the planner's export tests check against:

* ``torchtitan_job_config.json``: every section of torchtitan's ``JobConfig`` (TOML
  table name, dotted for nested tables) -> its fields, with type annotation and default;
* ``megatron_arguments.json``: every command-line flag Megatron-LM's ``pretrain_gpt.py``
  parser accepts (the ``add_argument`` calls of megatron/training/arguments.py and the
  flags ``ArgumentGroupFactory`` builds from the config dataclasses it is given).

Both are read statically (``ast``) from a local git clone at the pinned tag, so neither
project nor torch has to be importable:

    python tests/data/pin_upstream.py TORCHTITAN_GIT_DIR MEGATRON_GIT_DIR

The tags are the constants below; the JSON files record the tag and its commit.
"""
import ast
import json
import subprocess
import sys
from pathlib import Path

TORCHTITAN_TAG = "v0.2.2"  # the last torchtitan release configured by TOML (main moved to Python configs)
MEGATRON_TAG = "core_v0.19.0"
HERE = Path(__file__).parent


def _show(git_dir, tag, path):
    return subprocess.run(["git", "-C", git_dir, "show", f"{tag}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def _commit(git_dir, tag):
    return subprocess.run(["git", "-C", git_dir, "rev-parse", f"{tag}^{{commit}}"], check=True,
                          capture_output=True, text=True).stdout.strip()


def _classes(source):
    return {node.name: node for node in ast.parse(source).body if isinstance(node, ast.ClassDef)}


def _keyword(call, name):
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    return None


def _fields(cls):
    """(name, annotation node, default node or None, field() call or None) of a dataclass body."""
    out = []
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if ast.unparse(node.annotation).startswith(("ClassVar", "typing.ClassVar")):
                continue
            value = node.value
            call = value if (isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field")) \
                else None
            if call is not None:
                value = _keyword(call, "default")
            out.append((node.target.id, node.annotation, value, call))
    return out


# ---- torchtitan ----------------------------------------------------------------------------

def torchtitan_fields(git_dir):
    classes = _classes(_show(git_dir, TORCHTITAN_TAG, "torchtitan/config/job_config.py"))
    sections = {}

    def walk(cls_name, prefix):
        fields = {}
        for name, annotation, default, call in _fields(classes[cls_name]):
            kind = ast.unparse(annotation)
            if kind in classes:  # a nested table, e.g. [training.dataloader]
                walk(kind, f"{prefix}.{name}" if prefix else name)
                continue
            if default is None and call is not None:
                factory = _keyword(call, "default_factory")
                default = factory.body if isinstance(factory, ast.Lambda) else None
                value = [] if ast.unparse(factory) == "list" else None
            else:
                value = None
            try:
                value = ast.literal_eval(default) if default is not None else value
            except ValueError:
                value = ast.unparse(default)
            fields[name] = {"type": kind, "default": value}
        if prefix:
            sections[prefix] = fields

    walk("JobConfig", "")
    return {"project": "pytorch/torchtitan", "tag": TORCHTITAN_TAG, "commit": _commit(git_dir, TORCHTITAN_TAG),
            "source": "torchtitan/config/job_config.py (JobConfig and the dataclasses it nests); models: "
                      "torchtitan/models/__init__.py _supported_models and each model's flavor dict "
                      "(the keyword arguments each flavor sets; the rest are its ModelArgs defaults)",
            "models": torchtitan_models(git_dir),
            "sections": dict(sorted(sections.items()))}


def _call_kwargs(call):
    """A ModelArgs(...) call's keyword arguments as plain values (nested calls as dicts)."""
    out = {}
    for keyword in call.keywords:
        value = keyword.value
        if isinstance(value, ast.Call):
            out[keyword.arg] = _call_kwargs(value)
        else:
            try:
                out[keyword.arg] = ast.literal_eval(value)
            except ValueError:
                out[keyword.arg] = ast.unparse(value)
    return out


def torchtitan_models(git_dir):
    """model name -> flavor -> the keyword arguments of its ModelArgs."""
    tree = ast.parse(_show(git_dir, TORCHTITAN_TAG, "torchtitan/models/__init__.py"))
    names = next(ast.literal_eval(node.value.args[0]) for node in tree.body if isinstance(node, ast.Assign)
                 and ast.unparse(node.targets[0]) == "_supported_models")
    models = {}
    for name in sorted(names):
        module = ast.parse(_show(git_dir, TORCHTITAN_TAG, f"torchtitan/models/{name}/__init__.py"))
        flavors, classes = {}, set()
        for node in module.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
                for key, value in zip(node.value.keys, node.value.values):
                    if isinstance(key, ast.Constant) and isinstance(value, ast.Call):
                        flavors[key.value] = _call_kwargs(value)
                        classes.add(ast.unparse(value.func))
        defaults = {}
        if len(classes) == 1:  # the ModelArgs defaults a flavor does not set (model/args.py)
            try:
                args_classes = _classes(_show(git_dir, TORCHTITAN_TAG, f"torchtitan/models/{name}/model/args.py"))
            except subprocess.CalledProcessError:
                args_classes = {}
            for field_name, _, default, _ in _fields(args_classes.get(classes.pop(), ast.ClassDef(body=[]))):
                try:
                    defaults[field_name] = ast.literal_eval(default) if default is not None else None
                except ValueError:
                    defaults[field_name] = ast.unparse(default)
        if flavors:
            models[name] = {"defaults": defaults, "flavors": flavors}
    return models


# ---- Megatron-LM -----------------------------------------------------------------------------

# Where each dataclass ArgumentGroupFactory is given lives (and its base classes).
MEGATRON_CLASSES = {
    "TransformerConfig": "megatron/core/transformer/transformer_config.py",
    "ModelParallelConfig": "megatron/core/model_parallel_config.py",
    "StragglerDetectionConfig": "megatron/training/config/resilience_config.py",
    "RerunStateMachineConfig": "megatron/training/config/resilience_config.py",
    "LoggerConfig": "megatron/training/config/training_config.py",
    "TrainingConfig": "megatron/training/config/training_config.py",
    "SchedulerConfig": "megatron/training/config/training_config.py",
    "CheckpointConfig": "megatron/training/config/training_config.py",
    "ValidationConfig": "megatron/training/config/training_config.py",
    "TokenizerConfig": "megatron/training/config/training_config.py",
    "ProfilingConfig": "megatron/training/config/common_config.py",
    "RNGConfig": "megatron/training/config/common_config.py",
    "DistributedInitConfig": "megatron/training/config/common_config.py",
    "FaultInjectorConfig": "megatron/core/fault_injector.py",
}


def _dataclass_flags(git_dir, cls_name, exclude):
    """The flags ArgumentGroupFactory(cls, exclude).build_group adds
    (megatron/training/argument_utils.py): ``--name-with-dashes`` per field with init=True,
    a bool defaulting to anything but False becomes ``--no-name`` and ``--disable-name``
    (store_false), and ``argparse_meta["arg_names"]`` in a field's metadata wins."""
    flags = {}
    for name, annotation, default, call in _dataclass_fields_by_name(git_dir, cls_name).values():
        if name in exclude:
            continue
        meta = None
        if call is not None:
            init = _keyword(call, "init")
            if init is not None and ast.literal_eval(init) is False:
                continue
            metadata = _keyword(call, "metadata")
            if isinstance(metadata, ast.Dict):
                for key, value in zip(metadata.keys, metadata.values):
                    if isinstance(key, ast.Constant) and key.value == "argparse_meta" and isinstance(value, ast.Dict):
                        meta = dict(zip([k.value for k in value.keys], value.values))
        kind = ast.unparse(annotation).replace(" ", "")
        is_bool = kind in ("bool", "Optional[bool]", "bool|None", "None|bool", "typing.Optional[bool]")
        dashed = name.replace("_", "-")
        try:
            default_value = ast.literal_eval(default) if default is not None else None
        except ValueError:
            default_value = ast.unparse(default)
        info = {"dest": name, "source": f"{cls_name}.{name}"}
        if is_bool:
            info["action"] = "store_true" if default_value is False else "store_false"
        else:
            info["action"] = "store"
            choices = _choices(git_dir, annotation)
            if choices:
                info["choices"] = choices
        names = [f"no-{dashed}", f"disable-{dashed}"] if info["action"] == "store_false" else [dashed]
        for key in ("action", "choices", "nargs"):
            if meta and key in meta:
                try:
                    info[key] = ast.literal_eval(meta[key])
                except ValueError:
                    pass
        if meta and "arg_names" in meta:
            names = [n.lstrip("-") for n in ast.literal_eval(meta["arg_names"])]
        for flag in names:
            flags[flag] = info
    return flags


def _choices(git_dir, annotation):
    """The values a Literal[...] or a megatron.core.transformer.enums Enum annotation allows
    (ArgumentGroupFactory._extract_type: Literal choices, or enum member names)."""
    node = annotation
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("Optional", "typing.Optional"):
        node = node.slice
    if isinstance(node, ast.BinOp):  # X | None
        node = node.left
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("Literal", "typing.Literal"):
        elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return [ast.literal_eval(e) for e in elements]
    if isinstance(node, ast.Name):
        enums = _classes(_show(git_dir, MEGATRON_TAG, "megatron/core/transformer/enums.py"))
        if node.id in enums:
            return [n.targets[0].id for n in enums[node.id].body if isinstance(n, ast.Assign)]
    return None


def _dataclass_fields_by_name(git_dir, cls_name):
    """Fields of a dataclass by name: its bases' first, the subclass's override."""
    cls = _classes(_show(git_dir, MEGATRON_TAG, MEGATRON_CLASSES[cls_name]))[cls_name]
    fields = {}
    for base in cls.bases:
        if ast.unparse(base) in MEGATRON_CLASSES:
            fields.update(_dataclass_fields_by_name(git_dir, ast.unparse(base)))
    fields.update({f[0]: f for f in _fields(cls)})
    return fields


def megatron_flags(git_dir):
    tree = ast.parse(_show(git_dir, MEGATRON_TAG, "megatron/training/arguments.py"))
    flags = {}
    for function in (node for node in tree.body if isinstance(node, ast.FunctionDef)):
        lists = {}  # local list literals, e.g. exclude = [...] in _add_network_size_args
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and isinstance(node.value, ast.List) \
                    and all(isinstance(e, ast.Constant) for e in node.value.elts):
                lists[node.targets[0].id] = ast.literal_eval(node.value)
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            if name.endswith(".add_argument"):
                names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                         and a.value.startswith("--")]
                if not names:
                    continue
                dest = _keyword(node, "dest")
                action = _keyword(node, "action")
                info = {"dest": dest.value if isinstance(dest, ast.Constant) else names[0][2:].replace("-", "_"),
                        "source": f"arguments.py {function.name}",
                        "action": action.value if isinstance(action, ast.Constant) else "store"}
                for key in ("choices", "nargs"):
                    value = _keyword(node, key)
                    if value is not None:
                        try:
                            info[key] = ast.literal_eval(value)
                        except ValueError:
                            pass
                for flag in names:
                    flags[flag[2:]] = info
            elif name == "ArgumentGroupFactory":
                cls_name = ast.unparse(node.args[0])
                exclude = _keyword(node, "exclude")
                if exclude is None:
                    excluded = []
                elif isinstance(exclude, ast.Name):
                    excluded = lists[exclude.id]
                else:
                    excluded = ast.literal_eval(exclude)
                flags.update(_dataclass_flags(git_dir, cls_name, set(excluded)))
    return {"project": "NVIDIA/Megatron-LM", "tag": MEGATRON_TAG, "commit": _commit(git_dir, MEGATRON_TAG),
            "source": "megatron/training/arguments.py add_argument calls and the ArgumentGroupFactory dataclasses "
                      "(megatron/training/argument_utils.py naming rules)",
            "flags": {flag: {k: v for k, v in info.items() if k != "source"} for flag, info in sorted(flags.items())}}


def main(torchtitan_git, megatron_git):
    for name, data in (("torchtitan_job_config.json", torchtitan_fields(torchtitan_git)),
                       ("megatron_arguments.json", megatron_flags(megatron_git))):
        table = "sections" if "sections" in data else "flags"
        head = {k: v for k, v in data.items() if k != table}
        rows = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in data[table].items()]
        if "models" in head:
            models = head.pop("models")
            head["models"] = None
        text = json.dumps(head, indent=1)[:-2] + f',\n "{table}": {{\n' + ",\n".join(rows) + "\n }\n}\n"
        if "models" in head:
            flavor_rows = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in models.items())
            text = text.replace('"models": null', '"models": {\n' + flavor_rows + "\n }")
        json.loads(text)
        (HERE / name).write_text(text)
        print(f"wrote {HERE / name}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
