# Two ways in without a ROS distro: `make demo` (the main job) and `make test`.
# In a ROS 2 workspace use colcon instead (README.md).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.lingbot_ros-installed

.PHONY: venv demo test test-distro lint clean

venv: $(STAMP)

$(STAMP): setup.py
	python3 -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -e '.[runtime,ros,test]'
	touch $(STAMP)

demo: venv
	$(VENV)/bin/lingbot-ros-demo

test: venv
	$(PY) -m pytest -q -ra

# The same suite the way a robot runs it: ROS 2 distro pieces (../shared/ros-distro),
# colcon build, colcon test, colcon test-result; fails when a test fails or none ran.
test-distro:
	.ci/test-distro

clean:
	rm -rf $(VENV) .venv-ros build install log *.egg-info
