# trainguard: two commands on a fresh machine.
#   make demo   installs, starts the local Kafka broker, runs the demo
#   make test   installs, starts the broker, runs the whole suite, stops the broker
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
STAMP := .trainguard/.installed

.PHONY: install demo test unit integration broker-start broker-stop bench eval clean

$(STAMP): pyproject.toml
	$(PIP) install -q -e '.[train,test]'
	if [ -d tests/plugins/sample_detector ]; then $(PIP) install -q -e tests/plugins/sample_detector; fi
	@mkdir -p .trainguard && touch $(STAMP)

install: $(STAMP)

broker-start: install
	trainguard broker start

broker-stop:
	-trainguard broker stop

demo: install broker-start
	trainguard demo

test: install broker-start
	@status=0; $(PYTHON) -m pytest tests || status=$$?; trainguard broker stop; exit $$status

unit: install
	$(PYTHON) -m pytest tests/unit

bench: install
	$(PYTHON) -m benchmarks

clean:
	-trainguard broker stop
	rm -rf .trainguard build *.egg-info
