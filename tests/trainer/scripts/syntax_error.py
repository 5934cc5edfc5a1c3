import keras

def broken(:
    pass
