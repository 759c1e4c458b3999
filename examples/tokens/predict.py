"""Tokens: a streaming language-model stand-in, our own upstream for streaming tests.

It yields the prompt back word by word (each word after the first keeps its leading
space, as language-model tokens do), waiting ``delay`` seconds before each, as a Cog
``ConcatenateIterator``: Cog posts one ``output`` webhook per token. With ``file``, the
first token is ``sha256:<hex of the file's bytes>``, so a test can check that an uploaded
file reached the model intact.
"""

import hashlib
import time

from cog import BasePredictor, ConcatenateIterator, Input, Path


class Predictor(BasePredictor):
    def predict(
        self,
        prompt: str = Input(description="The words to stream back"),
        delay: float = Input(default=0.0, ge=0.0, le=10.0, description="Seconds per token"),
        file: Path = Input(default=None, description="A file whose SHA-256 comes first"),
    ) -> ConcatenateIterator[str]:
        if file is not None:
            yield "sha256:" + hashlib.sha256(Path(file).read_bytes()).hexdigest()
        for index, word in enumerate(prompt.split(" ")):
            if delay:
                time.sleep(delay)
            print(f"token {index}", flush=True)
            yield word if index == 0 else " " + word
