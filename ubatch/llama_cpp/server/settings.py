"""The settings of llama-cpp-python 0.3.36's server (ModelSettings, ServerSettings, Settings, ConfigFileSettings),
their names, types and defaults, without pydantic: values come from keyword arguments, else from the environment
variable of the upper-cased name (as pydantic-settings reads them), else the default."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

# name -> (kind, default): kind "str" / "int" / "float" / "bool" / "floats" / "strs" / "json" / "intbool"
MODEL_FIELDS: Dict[str, Tuple[str, Any]] = {
    "model": ("str", None), "model_alias": ("str", None), "n_gpu_layers": ("int", 0), "split_mode": ("int", 1),
    "main_gpu": ("int", 0), "tensor_split": ("floats", None), "vocab_only": ("bool", False),
    "use_mmap": ("bool", True), "use_mlock": ("bool", True), "kv_overrides": ("strs", None),
    "rpc_servers": ("str", None), "seed": ("int", 0xFFFFFFFF), "n_ctx": ("int", 2048), "n_batch": ("int", 512),
    "n_ubatch": ("int", 512), "n_threads": ("int", max((os.cpu_count() or 2) // 2, 1)),
    "n_threads_batch": ("int", max(os.cpu_count() or 1, 1)), "rope_scaling_type": ("int", -1),
    "rope_freq_base": ("float", 0.0), "rope_freq_scale": ("float", 0.0), "yarn_ext_factor": ("float", -1.0),
    "yarn_attn_factor": ("float", 1.0), "yarn_beta_fast": ("float", 32.0), "yarn_beta_slow": ("float", 1.0),
    "yarn_orig_ctx": ("int", 0), "mul_mat_q": ("bool", True), "logits_all": ("bool", True),
    "embedding": ("bool", False), "offload_kqv": ("bool", True), "flash_attn": ("bool", False),
    "last_n_tokens_size": ("int", 64), "lora_base": ("str", None), "lora_path": ("str", None),
    "numa": ("intbool", False), "chat_format": ("str", None), "chat_template_kwargs": ("json", None),
    "clip_model_path": ("str", None), "cache": ("bool", False), "cache_type": ("str", "ram"),
    "cache_size": ("int", 2 << 30), "hf_tokenizer_config_path": ("str", None),
    "hf_pretrained_model_name_or_path": ("str", None), "hf_model_repo_id": ("str", None),
    "draft_model": ("str", None), "draft_model_num_pred_tokens": ("int", 10), "type_k": ("int", None),
    "type_v": ("int", None), "verbose": ("bool", True),
}
SERVER_FIELDS: Dict[str, Tuple[str, Any]] = {
    "host": ("str", "localhost"), "port": ("int", 8000), "ssl_keyfile": ("str", None), "ssl_certfile": ("str", None),
    "api_key": ("str", None), "interrupt_requests": ("bool", True), "disable_ping_events": ("bool", False),
    "root_path": ("str", ""),
}


def parse_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, bytes):
        v = v.decode("utf-8")
    s = str(v).strip().lower()
    if s in ("1", "on", "t", "true", "y", "yes"):
        return True
    if s in ("0", "off", "f", "false", "n", "no"):
        return False
    raise ValueError(f"Invalid boolean argument: {v}")


def convert(name: str, kind: str, v: Any) -> Any:
    """One setting's value from a string (command line, environment) or a JSON value (config file)."""
    if v is None:
        return None
    try:
        if kind == "str":
            if not isinstance(v, str):
                raise TypeError("a string expected")
            return v
        if kind == "int":
            if isinstance(v, bool) or isinstance(v, float):
                raise TypeError("an integer expected")
            return int(v)
        if kind == "float":
            if isinstance(v, bool):
                raise TypeError("a number expected")
            return float(v)
        if kind == "bool":
            return parse_bool(v)
        if kind == "intbool":
            try:
                return parse_bool(v)
            except ValueError:
                return int(v)
        if kind == "floats":
            vals = json.loads(v) if isinstance(v, str) and v.startswith("[") else v
            return [float(x) for x in (vals if isinstance(vals, list) else str(vals).split(","))]
        if kind == "strs":
            return list(v) if isinstance(v, list) else [str(v)]
        if kind == "json":
            obj = json.loads(v) if isinstance(v, (str, bytes)) else v
            if not isinstance(obj, dict):
                raise TypeError("a JSON object expected")
            return obj
    except (TypeError, ValueError) as e:
        raise ValueError(f"setting {name}: {e} (got {v!r})") from None
    raise AssertionError(kind)


class _Settings:
    FIELDS: Dict[str, Tuple[str, Any]] = {}

    def __init__(self, **values: Any) -> None:
        unknown = set(values) - set(self.FIELDS)
        if unknown:
            raise ValueError(f"{type(self).__name__}: unknown setting(s) {sorted(unknown)}")
        for name, (kind, default) in self.FIELDS.items():
            if name in values and values[name] is not None:
                v = convert(name, kind, values[name])
            elif os.environ.get(name.upper()) is not None:
                v = convert(name, kind, os.environ[name.upper()])
            else:
                v = default
            setattr(self, name, v)
        if "model" in self.FIELDS and not self.model:
            raise ValueError("ModelSettings: the setting 'model' (a GGUF path) is required")

    def dict(self) -> Dict[str, Any]:
        return {n: getattr(self, n) for n in self.FIELDS}

    model_fields = property(lambda self: self.FIELDS)


class ModelSettings(_Settings):
    FIELDS = MODEL_FIELDS


class ServerSettings(_Settings):
    FIELDS = SERVER_FIELDS


class Settings(_Settings):
    FIELDS = {**MODEL_FIELDS, **SERVER_FIELDS}


class ConfigFileSettings(ServerSettings):
    """A config file: the server settings plus `models`, a list of model settings."""

    def __init__(self, models: Optional[List[Dict[str, Any]]] = None, **values: Any) -> None:
        super().__init__(**values)
        if not isinstance(models or [], list):
            raise ValueError("config file: 'models' must be a list")
        self.models = [ModelSettings(**m) for m in (models or [])]

    @classmethod
    def load(cls, path: str) -> "ConfigFileSettings":
        if not os.path.exists(path):
            raise ValueError(f"Config file {path} not found!")
        with open(path, "rb") as f:
            raw = f.read()
        if path.endswith((".yaml", ".yml")):
            try:
                import yaml
            except ImportError as e:
                raise ValueError(f"config file {path}: YAML needs PyYAML (pip install pyyaml)") from e
            data = yaml.safe_load(raw)
        else:
            data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError(f"config file {path}: a JSON / YAML object expected")
        return cls(**data)
