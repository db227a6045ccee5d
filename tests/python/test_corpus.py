"""The shipped training corpus: its shape, and that data/corpus/generate.py regenerates it."""
import importlib.util
import os
import pathlib

import numpy as np

SOURCE = pathlib.Path(os.environ["LPEMU_SOURCE_DIR"])
CORPUS = SOURCE / "data" / "corpus"


def _generator():
    spec = importlib.util.spec_from_file_location("corpus_generate", CORPUS / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _stories(tokens):
    """The corpus split at each BOS (every story starts with one)."""
    starts = np.flatnonzero(tokens == 1)
    return np.split(tokens, starts[1:])


def test_corpus_is_stories_of_the_shipped_tokenizer():
    tokens = np.load(CORPUS / "stories260K_samples.npy")
    assert tokens.dtype == np.dtype("<u2") and tokens.ndim == 1
    assert tokens[0] == 1
    stories = _stories(tokens)
    assert len(stories) == 1024
    # A story is BOS + up to 256 positions (a run stops early where the model samples BOS).
    assert all(2 <= len(s) <= 257 for s in stories)
    assert int(tokens.max()) < 512
    # Sampled at temperature 1, the stories differ.
    assert len({tuple(s) for s in stories}) == 1024


def test_generate_reproduces_the_first_and_last_stories():
    gen = _generator()
    tokens = np.load(CORPUS / "stories260K_samples.npy")
    stories = _stories(tokens)
    first3 = np.concatenate(stories[:3])
    assert np.array_equal(gen.corpus(3), first3)
    assert np.array_equal(np.asarray(gen.story(1023), dtype="<u2"), stories[-1])
