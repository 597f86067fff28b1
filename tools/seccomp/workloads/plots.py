# Workload for tools/seccomp/measure.py: matplotlib and Pillow.
import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from PIL import Image, ImageDraw, ImageFilter

x = np.linspace(0, 10, 500)
fig, axes = plt.subplots(2, 2)
axes[0][0].plot(x, np.sin(x), label="sin")
axes[0][0].legend()
axes[0][1].hist(np.random.default_rng(1).normal(size=5000), bins=50)
axes[1][0].imshow(np.outer(np.sin(x), np.cos(x)))
axes[1][1].scatter(x, np.cos(x), c=x)
fig.suptitle("Caf\u00e9 \u03b1\u03b2\u03b3")
fig.savefig("p.png")
fig.savefig("p.svg")
fig.savefig("p.pdf")
plt.show()
im = Image.new("RGB", (300, 200), "white")
ImageDraw.Draw(im).ellipse((10, 10, 200, 150), fill="red")
im.filter(ImageFilter.GaussianBlur(3)).save("i.jpg")
Image.open("i.jpg").convert("L").resize((50, 50)).save("i.png")
print(matplotlib.get_backend())
