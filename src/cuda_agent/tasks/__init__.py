"""Tasks: the Task type, loaders for every source, and validation without execution."""

from cuda_agent.tasks.loaders import (EXAMPLES_DIR, TaskSet, load_dataset, load_file, load_folder,
                                      load_kernelbench_checkout, load_task, load_tasks)
from cuda_agent.tasks.task import Task, TaskError

__all__ = ["EXAMPLES_DIR", "Task", "TaskError", "TaskSet", "load_dataset", "load_file", "load_folder",
           "load_kernelbench_checkout", "load_task", "load_tasks"]
