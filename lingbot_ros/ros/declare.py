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
Our parameters as rclpy holds them: declared, checked by name, widened and refused.

The table (:mod:`lingbot_ros.streaming.parameters`) says what each parameter is and checks
values without rclpy; this module is where its rows meet a node: the declaration that
collects what a YAML file got wrong instead of raising, the YAML keys that are not
parameters, a whole number accepted where a float is declared, and the refusal, in our
words, of a change rclpy would answer with its own.
"""

import difflib
from typing import Any, List

from lingbot_ros.ros.params import descriptor
from lingbot_ros.streaming.parameters import check_one, Kind, ParamError, shown, SPEC, SPECS
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter

ROS_OWN_PARAMETERS = ('use_sim_time', 'start_type_description_service')


class OurParameters:
    """
    What a node of ours does with its parameters beyond rclpy (a mixin before rclpy's Node).

    Changes are refused in our words before rclpy's checks run, whole numbers are taken
    where floats are declared, and a value is read back with the table's default where
    rclpy has none (a parameter a bad file left undeclared).
    """

    def widen_numbers(self, changed: list) -> list:
        """Accept a whole number where a float is declared (``ros2 param set ... 5``)."""
        return [widened(p) for p in changed]

    def set_parameters_atomically(self, parameter_list: list) -> SetParametersResult:
        """
        Refuse in our own words before rclpy's checks run.

        rclpy's descriptor checks answer ``Wrong parameter type, expected '2' got '4'`` or
        ``Trying to set a read-only parameter``; ours name the parameter, the value and
        what is allowed, and say that a read-only one takes effect only after a restart.
        (The parameter services and ``ros2 param set`` come through here.)
        """
        reason = refusal([widened(p) for p in parameter_list])
        if reason:
            self.get_logger().warning(f'parameter change refused: {reason}')
            return SetParametersResult(successful=False, reason=reason)
        return super().set_parameters_atomically(parameter_list)

    def set_parameters(self, parameter_list: list) -> list:
        """Set each one as :meth:`set_parameters_atomically` does (the same refusals)."""
        return [self.set_parameters_atomically([p]) for p in parameter_list]

    def parameter_value(self, name: str) -> Any:
        """Return a parameter's value as declared, or its default where it has none."""
        try:
            value = self.get_parameter(name).value
        except Exception:  # noqa: BLE001 (undeclared after a type error, or uninitialised)
            return SPEC[name].default
        return SPEC[name].default if value is None else value

    def parameter_values(self) -> dict:
        """Return every parameter of the table: name -> value (as parse() takes them)."""
        return {spec.name: self.parameter_value(spec.name) for spec in SPECS}


def declare_all(node: Node) -> List[str]:
    """Declare every parameter on ``node``; return what the YAML got wrong (not raised)."""
    errors = []
    overrides = node._parameter_overrides
    for spec in SPECS:
        value = spec.default
        given = overrides.get(spec.name)
        if isinstance(value, list) and given is not None \
                and given.type_ == Parameter.Type.NOT_SET:
            # YAML's [] carries no element type: rcl leaves it unset. It means [].
            del overrides[spec.name]
            try:
                check_one(spec.name, [])
            except ParamError as exc:
                errors.append(str(exc))
        elif given is not None:
            # checked here, in our words: rclpy's declaration would refuse it in its own
            # ("Trying to set parameter ... of type 'STRING'", "Invalid parameter value")
            given = widened(given)
            try:
                check_one(spec.name, given.value)
                overrides[spec.name] = given
            except ParamError as exc:
                errors.append(str(exc))
                del overrides[spec.name]  # declared with its default; configure refuses
        empty_list = isinstance(value, list) and not value
        if empty_list:
            value = Parameter.Type.STRING_ARRAY  # rclpy would infer [] as a byte array
        desc = descriptor(spec)
        try:
            if empty_list:  # writable for the one set below, read-only again after it
                declared = node.declare_parameter(
                    spec.name, value, ParameterDescriptor(type=desc.type))
            else:
                declared = node.declare_parameter(spec.name, value, desc)
        except Exception as exc:  # noqa: BLE001 (wrong type or range from the YAML)
            errors.append(f'{spec.name}: {exc}')
            continue
        if empty_list:
            if declared.type_ == Parameter.Type.NOT_SET:
                # a value, typed []: get_parameters answers nothing at all for a request
                # that names one unset parameter (ros2 param dump showed {}). rclpy's own
                # set: a node of ours refuses read-only parameters in its override.
                Node.set_parameters(node, [Parameter(spec.name, Parameter.Type.STRING_ARRAY,
                                                     [])])
            node.set_descriptor(spec.name, desc)
    return errors


def unknown_parameters(node: Node) -> List[str]:
    """Name (and log) the YAML keys for ``node`` that are not parameters (typos, old names)."""
    unknown = []
    for name in sorted(node._parameter_overrides):
        if name in SPEC or name in ROS_OWN_PARAMETERS or name.startswith('qos_overrides.'):
            continue
        close = difflib.get_close_matches(name, list(SPEC), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ''
        node.get_logger().warning(f'unknown parameter {name!r} ignored{hint}; '
                                  'docs/parameters.md lists every parameter')
        unknown.append(name)
    return unknown


def widened(p: Parameter) -> Parameter:
    """Turn a whole number (or a list of them) into floats where floats are declared."""
    spec = SPEC.get(p.name)
    if spec is None:
        return p
    if spec.kind is Kind.DOUBLE and p.type_ == Parameter.Type.INTEGER:
        return Parameter(p.name, Parameter.Type.DOUBLE, float(p.value))
    if spec.kind is Kind.DOUBLES and p.type_ == Parameter.Type.INTEGER_ARRAY:
        return Parameter(p.name, Parameter.Type.DOUBLE_ARRAY, [float(v) for v in p.value])
    return p


def refusal(changed: list) -> str:
    """Say why a change of our parameters is refused ('' when it is not)."""
    for p in changed:
        spec = SPEC.get(p.name)
        if spec is None or p.type_ == Parameter.Type.NOT_SET:
            continue  # rclpy's own (use_sim_time ...) and undeclaring: rclpy answers
        value = shown(p.value)
        if spec.read_only:
            return (f'{p.name}={value!r} refused: {p.name} is read-only, fixed when the node '
                    'starts (it sizes the model, the pools or the subscriptions); it takes '
                    'effect only after a restart with the new value in the parameter file '
                    f'(or -p {p.name}:=...)')
        try:
            check_one(p.name, value)
        except ParamError as exc:
            return str(exc)
    return ''
