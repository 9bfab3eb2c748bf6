# Copyright 2026 The lingbot_ros Authors
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""
The package's import graph: no cycle, and arrows only down the layers.

Every module under ``lingbot_ros/`` is parsed with ``ast`` (nothing is imported), and every
import statement counts, those inside functions (lazy imports) and under ``TYPE_CHECKING``
included: a lazy import is still an arrow between two modules. Layers:
``ros -> streaming -> (model, cache)``; ``tools`` may use any of them; only ``ros`` and
``tools`` speak ROS.
"""

import ast
from pathlib import Path
from typing import Dict, FrozenSet, List, Set

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = 'lingbot_ros'

# Top-level packages that are ROS itself or its message and service types.
ROS_PACKAGES = frozenset({
    'rclpy', 'rcl_interfaces', 'builtin_interfaces', 'tf2_ros', 'cv_bridge', 'launch',
    'launch_ros', 'message_filters', 'rosidl_runtime_py', 'rosbag2_py', 'ament_index_python'})
ROS_SUFFIXES = ('_msgs', '_srvs', '_interfaces')
SPEAKS_ROS = ('ros', 'tools')


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix('').parts)
    if parts[-1] == '__init__':
        parts.pop()
    return '.'.join(parts)


def _modules() -> Dict[str, Path]:
    return {_module_name(p): p for p in sorted((ROOT / PACKAGE).rglob('*.py'))}


def _imported(path: Path, name: str, is_package: bool) -> Set[str]:
    """Return every module name an import statement of ``path`` names (absolute)."""
    here = name if is_package else name.rpartition('.')[0]
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                anchor = here.split('.')
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = '.'.join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f'{base}.{alias.name}' for alias in node.names)  # a submodule?
    return found


def _graph() -> Dict[str, Set[str]]:
    """Return module -> the package's modules it imports (third-party names dropped)."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        targets = _imported(path, name, path.name == '__init__.py')
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _external(name: str) -> Set[str]:
    """Return the top-level names of what module ``name`` imports from outside the package."""
    path = _modules()[name]
    return {t.split('.')[0] for t in _imported(path, name, path.name == '__init__.py')
            if t and not t.startswith(PACKAGE)}


def _cycles(graph: Dict[str, Set[str]]) -> List[FrozenSet[str]]:
    """Return the strongly connected components with more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[FrozenSet[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _layer(name: str) -> str:
    parts = name.split('.')
    return parts[1] if len(parts) > 1 else ''


def _arrows(graph: Dict[str, Set[str]], source: str, target: str) -> List[str]:
    return sorted(f'{m} -> {t}' for m, targets in graph.items() if _layer(m) == source
                  for t in targets if _layer(t) == target)


def test_the_graph_sees_lazy_and_relative_imports():
    graph = _graph()
    assert len(graph) > 50
    # imported inside a function (the engine's memory estimate)
    assert 'lingbot_ros.streaming.memory' in graph['lingbot_ros.streaming.engine']
    # ``from .backends import ...`` inside the cache package
    assert 'lingbot_ros.cache.backends' in graph['lingbot_ros.cache.stream']


def test_cycle_finder_finds_a_cycle_and_only_cycles():
    graph = {'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}, 'e': set()}
    assert _cycles(graph) == [frozenset({'a', 'b', 'c'})]
    assert _cycles({'a': {'b'}, 'b': set()}) == []


def test_no_import_cycle():
    cycles = [sorted(c) for c in _cycles(_graph())]
    assert not cycles, f'import cycles: {cycles}'


def test_only_ros_and_tools_speak_ros():
    speaking = {}
    for name in _modules():
        if _layer(name) in SPEAKS_ROS:
            continue
        ros = sorted(t for t in _external(name)
                     if t in ROS_PACKAGES or t.endswith(ROS_SUFFIXES))
        if ros:
            speaking[name] = ros
    assert not speaking, f'ROS imported outside ros/ and tools/: {speaking}'


@pytest.mark.parametrize('source,target', [
    ('model', 'cache'), ('cache', 'model'),
    ('model', 'streaming'), ('cache', 'streaming'),
    ('model', 'ros'), ('cache', 'ros'), ('streaming', 'ros'),
    ('model', 'tools'), ('cache', 'tools'), ('streaming', 'tools'), ('ros', 'tools'),
])
def test_no_arrow_against_the_layers(source, target):
    assert not _arrows(_graph(), source, target)
