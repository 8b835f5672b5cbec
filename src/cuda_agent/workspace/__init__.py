"""The agent's workspace: SKILL.md, model.py, model_new.py, kernels/, the binding registry and the
three commands, with a signed manifest of the protected files."""

from cuda_agent.workspace.create import (ACTIONS, HARNESS_FILES, TEMPLATES, SkillParams, Workspace,
                                         create_workspace, starting_model_new)
from cuda_agent.workspace.manifest import (MANIFEST, Manifest, ManifestError, read_manifest,
                                           tampered_files)

__all__ = ["ACTIONS", "HARNESS_FILES", "MANIFEST", "TEMPLATES", "Manifest", "ManifestError", "SkillParams",
           "Workspace", "create_workspace", "read_manifest", "starting_model_new", "tampered_files"]
