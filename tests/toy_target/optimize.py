"""The toy target's editable file: build_decoder(model, example_input) -> (forward_fn, info)."""


def build_decoder(model, example_input):
    def forward_fn(x):
        return model(x)

    return forward_fn, {"dtype": "float32", "compile": "none"}
