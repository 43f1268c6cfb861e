"""Red team 2: vision's baseline pretrained offline (tests/security/hostile/pretrained_digits.py),
quantized to 3 bits a weight and packed into an int32 buffer (190 words, under the buffer cap
of 273 words). Buffers are not redrawn; each weight = decode(buffer) * scale + delta, where scale is
a 1-element buffer and delta a zero parameter of the baseline's shape
(a constant, kept exactly): the bench trains from the pretrained point."""
import torch
from torch import nn
from torch.nn import functional as F

PACKED = [594426083, 848148195, 516759478, 688286014, 1065971035, 231045991, 827434748, 745894591, 613267236, 647117091, 732645150, 479082844, 735446307, 579649764, 325962586, 596527370, 613566692, 476952795, 479049507, 611170523, 594392795, 460437275, 476956443, 594659547, 726288604, 747513630, 478888988, 466690781, 41318364, 611174818, 594426147, 342505700, 592070500, 894677796, 901855517, 596026785, 484063715, 596752668, 609106212, 611212515, 628628629, 498215445, 328570525, 7518805, 594659044, 965622043, 611763341, 616122451, 330706151, 44350427, 669867100, 462276364, 611202780, 579971502, 609071844, 784068596, 632080017, 1050072857, 462305589, 613533404, 632412507, 615332061, 528889051, 584194348, 611477533, 477348642, 611436763, 442185499, 273820387, 301905100, 473127212, 409479836, 453345242, 611174116, 829572892, 894809451, 289297315, 345622882, 693529124, 573743010, 476989212, 714197211, 626180304, 445859683, 454113059, 901446554, 864631644, 460175066, 594687715, 409753700, 745655966, 228070929, 335394404, 221104295, 479084251, 613566171, 406085476, 411654493, 485830003, 595957045, 760304883, 613542629, 611432740, 462539043, 596490012, 476989212, 460179164, 479050012, 596494051, 477219099, 479578339, 727312859, 271730594, 596821208, 1051532633, 487106314, 611436772, 577911003, 343103186, 62551795, 454196316, 95206755, 577064317, 728388788, 455992345, 378652394, 462277340, 596785801, 726525090, 458098718, 443902243, 594659590, 612972764, 189482219, 564984011, 649517417, 611430633, 189712620, 749844771, 496490275, 867284701, 464434985, 590471982, 493205148, 596785364, 596792996, 596792614, 476666636, 631888099, 311277354, 462797409, 209303771, 423274330, 302069973, 269371676, 613537314, 746175195, 204617947, 711871322, 346971429, 192263019, 590230173, 493443300, 594421025, 325989532, 431098020, 577125156, 555926813, 611468568, 613603668, 590460708, 177260818, 661539044, 311568147, 598885729, 11151644, 611207395, 344807147, 596003037, 479364196, 344570068, 512379171, 613300827, 745614108, 328250467, 505525414, 749090597, 479312219, 75871907, 12433186]
SCALES = [0.3797454833984375, 0.13517507910728455, 0.20135106146335602, 0.11160892993211746, 0.268890380859375, 0.15432268381118774]
SHAPES = [('p0_weight', [8, 1, 3, 3]), ('p0_bias', [8]), ('p3_weight', [16, 8, 3, 3]), ('p3_bias', [16]), ('p7_weight', [10, 64]), ('p7_bias', [10])]
N = 1898


class Packed(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("packed", torch.tensor(PACKED, dtype=torch.int32))
        self.register_buffer("z64", torch.zeros(1, dtype=torch.float64))  # 2 words: float64 promotion
        self.names = []
        for (name, shape), s in zip(SHAPES, SCALES, strict=True):
            setattr(self, name, nn.Parameter(torch.zeros(shape)))
            self.register_buffer(name + "_s", torch.tensor([s]))
            self.names.append((name, shape))

    def weights(self):
        pows = torch.pow(8.0, torch.arange(10, device=self.packed.device)) + self.z64
        d = torch.remainder(torch.div(self.packed[:, None], pows[None, :], rounding_mode="floor"), 8)
        d = d.reshape(-1)[:N] - 3.5
        out, i = {}, 0
        for name, shape in self.names:
            n = 1
            for s in shape:
                n *= s
            out[name] = d[i:i + n].view(shape) * getattr(self, name + "_s") + getattr(self, name)
            i += n
        return out

    def forward(self, x):
        w = self.weights()
        x = x + self.z64
        h = F.max_pool2d(F.relu(F.conv2d(x, w["p0_weight"], w["p0_bias"], padding=1)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, w["p3_weight"], w["p3_bias"], padding=1)), 2)
        return F.linear(h.flatten(1), w["p7_weight"], w["p7_bias"])


def build_model(spec):
    return Packed()
