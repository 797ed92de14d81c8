"""The ahead-of-time engine builder: checkpoint readers, weight encoding and the file writer."""
