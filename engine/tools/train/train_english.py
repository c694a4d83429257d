#!/usr/bin/python3
"""Trains flashgate's default model, models/flash-english.gguf: a small deepseek2 (MLA + MoE)
model on the English text of Debian's `fortunes` and `fortunes-min` packages.

Needs /usr/bin/python3 with Debian's python3-torch (CPU) and python3-numpy, and a flashgate
build (flashgate-modelgen, flashgate-tokenize). Not part of CI. docs/english-model.md has the
recipe, the exact command of the committed model and its measured numbers.

Stages (all under --work DIR, each deterministic given --seed):
  1. corpus: every fortune of the files in CORPUS_FILES becomes one document; a document is
     held out when crc32(its bytes) % 20 == 0 (about 5 %, independent of file order); the
     rest is shuffled with the seed. About a quarter of the training documents are wrapped
     in the chat markers the gateway writes (<|User|> question <|Assistant|> fortune), so
     the first `flashgate-cli chat` answers in English. Writes train.txt, heldout.txt
     (fortune format: documents separated by "%" lines), bpe.txt and words.txt.
  2. vocabulary: flashgate-modelgen --preset english --bpe-corpus bpe.txt writes init.gguf
     (our BPE trainer, random weights); its hyper-parameters and tensor list are the single
     source of the geometry here. flashgate-tokenize --docs turns both splits into ids
     (BOS document EOS, as the engine's prompts start with BOS).
  3. training: AdamW; the learning rate warms up linearly, stays, then decays linearly to a
     tenth from --decay-from to --steps (steps of --batch windows of --seq tokens drawn from the
     training ids with the seeded generator). With --max-minutes the decay starts when the
     time budget is three quarters spent, and the log names the --steps/--decay-from that
     reproduce the run. The selection
     biases (exp_probs_b) are not trained by gradient: as in DeepSeek-V3's auxiliary-loss-free
     balancing they move by --bias-rate against each expert's load after every step.
  4. export: weights.fgw (FGW1, engine/model/modelgen.h) in init.gguf's tensor order, then
     flashgate-modelgen --weights writes the GGUF in the requested type: the same writer,
     key names and tensor layout as every generated model.

An optional second phase (--mtp-steps N --init-from GGUF) trains DeepSeek-V3's MTP block on a
frozen trunk: init-mtp.gguf (flashgate-modelgen --nextn 1, the same vocabulary from the same
bpe.txt) gives the tensor list; the trunk and its selection biases come from --init-from (an
F32, F16 or BF16 GGUF this script wrote, whose vocabulary must be init-mtp.gguf's); only the
block (blk.N: an MoE layer, nextn.eh_proj, enorm, hnorm, shared_head_norm) is trained, on
the engine's MTP math (engine/model/deepseek2/forward.h): row p is
head(RMSNorm(layer_N(eh_proj([RMSNorm(E[t_p]) * enorm ; RMSNorm(h_{p-1}) * hnorm]))) *
shared_head_norm), h the trunk's output after output_norm, h_{-1} = 0, and it learns t_{p+1}
(the trunk's own target: the block drafts the token after the one the trunk has not run yet).
The export then writes the model with the block (--out).

The forward pass is exactly the engine's deepseek2 math (tests/reference/deepseek2_ref.py):
RMSNorm x/sqrt(mean(x^2)+eps)*w; q LoRA with its norm; kv_a -> (latent, k_pe), latent
normalised; per-head K_nope = latent . k_b, V = latent . v_b; GGML "normal" RoPE on adjacent
pairs; scale 1/sqrt(nope+rope); a leading dense SwiGLU layer; MoE layers with sigmoid
routing, selection by score + bias, top-k, weights = unbiased scores normalised and times
expert_weights_scale, plus the shared expert; final RMSNorm and the untied output head.
"""

import argparse
import math
import os
import random
import re
import subprocess
import sys
import time
import zlib

import numpy as np
import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
from gguf_read import GGUFFile  # noqa: E402

FORTUNE_DIR = "/usr/share/games/fortunes"
# Every text file of `fortunes` and `fortunes-min` except ASCII art, the untranslated
# stubs, and the two files of ethnic and gender jokes (not what a default model should echo).
CORPUS_FILES = [
    "computers", "cookie", "debian", "definitions", "disclaimer", "drugs", "education", "food",
    "fortunes", "goedel", "humorists", "kids", "knghtbrd", "law", "linux", "linuxcookie",
    "literature", "love", "magic", "medicine", "miscellaneous", "news", "paradoxum", "people",
    "perl", "pets", "platitudes", "politics", "pratchett", "riddles", "science", "songs-poems",
    "sports", "startrek", "tao", "wisdom", "work", "zippy",
]
HELDOUT_MOD = 20
BPE_BYTES = 400000          # the BPE trainer sees this prefix of train.txt (it is O(text x merges))
CHAT_EVERY = 4              # one training document in CHAT_EVERY is wrapped as a chat turn
USER = "<\uff5cUser\uff5c>"
ASSISTANT = "<\uff5cAssistant\uff5c>"
QUESTIONS = [
    "Hello, who are you?", "Hi!", "Tell me something.", "What do you know?", "Say something wise.",
    "Tell me a joke.", "What is on your mind?", "Can you help me?", "What should I do today?",
    "Give me some advice.", "What is the meaning of life?", "Tell me about computers.",
    "Do you have a quote for me?", "How are you?", "What do you think about work?",
    "Tell me a story.", "Good morning.", "Why?", "What is love?", "Tell me about science.",
]


# ----------------------------------------------------------------------------- corpus

def read_fortunes(path):
    docs, cur = [], []
    with open(path, "rb") as f:
        for line in f.read().split(b"\n"):
            if line == b"%":
                docs.append(cur)
                cur = []
            else:
                cur.append(line.rstrip())
    docs.append(cur)
    out = []
    for d in docs:
        while d and not d[0]:
            d.pop(0)
        while d and not d[-1]:
            d.pop()
        if d:
            out.append(b"\n".join(d) + b"\n")
    return out


def build_corpus(work, seed):
    train, held = [], []
    for name in CORPUS_FILES:
        for doc in read_fortunes(os.path.join(FORTUNE_DIR, name)):
            if b"\n%" in doc or doc.startswith(b"%"):
                continue                      # cannot be written back in the "%" format
            (held if zlib.crc32(doc) % HELDOUT_MOD == 0 else train).append(doc)
    rng = random.Random(seed)
    rng.shuffle(train)
    shaped = []
    for i, doc in enumerate(train):
        if i % CHAT_EVERY == 0:
            q = QUESTIONS[rng.randrange(len(QUESTIONS))].encode()
            doc = USER.encode() + q + ASSISTANT.encode() + doc
        shaped.append(doc)
    for name, docs in (("train.txt", shaped), ("heldout.txt", held)):
        with open(os.path.join(work, name), "wb") as f:
            f.write(b"%\n".join(docs))
    text = b"".join(shaped)
    with open(os.path.join(work, "bpe.txt"), "wb") as f:
        f.write(text[:BPE_BYTES])
    # the corpus's own dictionary (tests/english/words.txt): lowercase words seen at least twice
    counts = {}
    for w in re.findall(rb"[a-z]+", text.lower()):
        counts[w] = counts.get(w, 0) + 1
    with open(os.path.join(work, "words.txt"), "wb") as f:
        f.write(b"".join(w + b"\n" for w in sorted(counts) if counts[w] >= 2))
    print("corpus: %d training documents (%d bytes), %d held out (%d bytes)"
          % (len(shaped), len(text), len(held), sum(len(d) for d in held)), flush=True)


def run(cmd):
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def load_ids(path):
    return torch.from_numpy(np.fromfile(path, dtype="<u4").astype(np.int64))


# ----------------------------------------------------------------------------- model

class HP(object):
    def __init__(self, g):
        k = lambda n: g.get("deepseek2." + n)  # noqa: E731
        self.d = int(k("embedding_length"))
        self.n_nextn = int(k("nextn_predict_layers") or 0)          # the MTP block: the last block
        self.n_layer = int(k("block_count")) - self.n_nextn
        self.n_dense = int(k("leading_dense_block_count"))
        self.n_ff = int(k("feed_forward_length"))
        self.H = int(k("attention.head_count"))
        self.q_lora = int(k("attention.q_lora_rank"))
        self.kv_lora = int(k("attention.kv_lora_rank"))
        self.n_rot = int(k("rope.dimension_count"))
        self.nope = int(k("attention.key_length_mla")) - self.n_rot
        self.v = int(k("attention.value_length_mla"))
        self.base = float(k("rope.freq_base"))
        self.eps = float(k("attention.layer_norm_rms_epsilon"))
        self.E = int(k("expert_count"))
        self.k = int(k("expert_used_count"))
        self.w_scale = float(k("expert_weights_scale"))
        self.w_norm = bool(k("expert_weights_norm"))
        assert int(k("expert_gating_func")) == 2 and not g.get("deepseek2.expert_group_count")
        assert g.get("deepseek2.rope.scaling.type") is None      # YaRN off
        self.V = g.tensors["token_embd.weight"].ne[1]


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, cos, sin):
    """GGML normal mode: rotates (x[2i], x[2i+1]); x (..., T, heads?, n_rot) with cos (T, n_rot/2)."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


class Model(torch.nn.Module):
    def __init__(self, hp, shapes, seed):
        super().__init__()
        self.hp = hp
        torch.manual_seed(seed)
        self.p = torch.nn.ParameterDict()
        self.names = list(shapes)
        self.bias = {}
        n_res = 2 * hp.n_layer
        for name, shape in shapes.items():
            key = name.replace(".", "__")
            if name.endswith("exp_probs_b.bias"):
                self.bias[name] = torch.zeros(shape)
                continue
            if len(shape) == 1:
                t = torch.ones(shape)
            elif name == "token_embd.weight":
                t = torch.randn(shape)
            else:
                fan_in = shape[-1]
                std = 1.0 / math.sqrt(fan_in)
                if name.endswith(("attn_output.weight", "ffn_down.weight", "ffn_down_exps.weight",
                                  "ffn_down_shexp.weight")):
                    std /= math.sqrt(n_res)
                if name == "output.weight":
                    std = 0.5 / math.sqrt(fan_in)
                t = torch.randn(shape) * std
            self.p[key] = torch.nn.Parameter(t)
        i = torch.arange(hp.n_rot // 2, dtype=torch.float64)
        self.inv_freq = hp.base ** (-2.0 * i / hp.n_rot)

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def forward(self, tok, loads=None):
        hp = self.hp
        B, T = tok.shape
        pos = torch.arange(T, dtype=torch.float64)[:, None] * self.inv_freq[None, :]
        cos, sin = torch.cos(pos).float(), torch.sin(pos).float()
        mask = torch.full((T, T), float("-inf")).triu(1)
        scale = 1.0 / math.sqrt(hp.nope + hp.n_rot)
        x = F.embedding(tok, self.w("token_embd.weight"))
        for il in range(hp.n_layer):
            x = self.layer(il, x, cos, sin, mask, scale, loads)
        x = rms_norm(x, self.w("output_norm.weight"), hp.eps)
        return x @ self.w("output.weight").t()

    def forward_mtp(self, tok, loads=None):
        """The MTP block's logits (B, T, V) on a frozen trunk: row p drafts t_{p+1} from t_p and
        the trunk's normed hidden at p - 1 (0 at p = 0)."""
        hp = self.hp
        B, T = tok.shape
        with torch.no_grad():
            x = F.embedding(tok, self.w("token_embd.weight"))
            pos = torch.arange(T, dtype=torch.float64)[:, None] * self.inv_freq[None, :]
            cos, sin = torch.cos(pos).float(), torch.sin(pos).float()
            mask = torch.full((T, T), float("-inf")).triu(1)
            scale = 1.0 / math.sqrt(hp.nope + hp.n_rot)
            for il in range(hp.n_layer):
                x = self.layer(il, x, cos, sin, mask, scale, None)
            h = rms_norm(x, self.w("output_norm.weight"), hp.eps)
            h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)
        p = "blk.%d.nextn." % hp.n_layer
        e = rms_norm(F.embedding(tok, self.w("token_embd.weight")), self.w(p + "enorm.weight"), hp.eps)
        m = torch.cat([e, rms_norm(h_prev, self.w(p + "hnorm.weight"), hp.eps)], dim=-1)
        m = m @ self.w(p + "eh_proj.weight").t()
        m = self.layer(hp.n_layer, m, cos, sin, mask, scale, loads)
        m = rms_norm(m, self.w(p + "shared_head_norm.weight"), hp.eps)
        return m @ self.w("output.weight").t()

    def layer(self, il, x, cos, sin, mask, scale, loads):
        hp = self.hp
        B, T = x.shape[0], x.shape[1]
        p = "blk.%d." % il
        h = rms_norm(x, self.w(p + "attn_norm.weight"), hp.eps)
        qa = rms_norm(h @ self.w(p + "attn_q_a.weight").t(), self.w(p + "attn_q_a_norm.weight"), hp.eps)
        q = (qa @ self.w(p + "attn_q_b.weight").t()).view(B, T, hp.H, hp.nope + hp.n_rot)
        q_nope = q[..., :hp.nope]
        q_pe = rope(q[..., hp.nope:], cos[:, None, :], sin[:, None, :])
        kv = h @ self.w(p + "attn_kv_a_mqa.weight").t()
        c = rms_norm(kv[..., :hp.kv_lora], self.w(p + "attn_kv_a_norm.weight"), hp.eps)
        k_pe = rope(kv[..., hp.kv_lora:], cos, sin)                        # (B, T, rot)
        k_nope = torch.einsum("btr,hrn->bthn", c, self.w(p + "attn_k_b.weight"))
        v = torch.einsum("btr,hjr->bhtj", c, self.w(p + "attn_v_b.weight"))
        s = (torch.einsum("bthn,bshn->bhts", q_nope, k_nope)
             + torch.einsum("bthr,bsr->bhts", q_pe, k_pe)) * scale + mask
        o = torch.softmax(s, dim=-1) @ v                                   # (B, H, T, v)
        o = o.transpose(1, 2).reshape(B, T, hp.H * hp.v)
        x = x + o @ self.w(p + "attn_output.weight").t()
        h = rms_norm(x, self.w(p + "ffn_norm.weight"), hp.eps)
        if il < hp.n_dense:
            f = F.silu(h @ self.w(p + "ffn_gate.weight").t()) * (h @ self.w(p + "ffn_up.weight").t())
            x = x + f @ self.w(p + "ffn_down.weight").t()
        else:
            x = x + self.moe(p, h.reshape(B * T, hp.d), loads).view(B, T, hp.d)
        return x

    def moe(self, p, h, loads):
        hp = self.hp
        scores = torch.sigmoid(h @ self.w(p + "ffn_gate_inp.weight").t())    # (N, E)
        bias = self.bias[p + "exp_probs_b.bias"]
        with torch.no_grad():
            idx = torch.topk(scores + bias, hp.k, dim=-1).indices           # (N, k)
        wts = scores.gather(1, idx)
        if hp.w_norm:
            wts = wts / wts.sum(-1, keepdim=True)
        wts = wts * hp.w_scale
        wg, wu, wd = (self.w(p + n) for n in ("ffn_gate_exps.weight", "ffn_up_exps.weight",
                                               "ffn_down_exps.weight"))
        out = torch.zeros_like(h)
        for e in range(hp.E):
            rows, slot = torch.nonzero(idx == e, as_tuple=True)
            if rows.numel() == 0:
                continue
            he = h.index_select(0, rows)
            y = (F.silu(he @ wg[e].t()) * (he @ wu[e].t())) @ wd[e].t()
            out.index_add_(0, rows, y * wts[rows, slot][:, None])
        if loads is not None:
            loads[p] = torch.bincount(idx.flatten(), minlength=hp.E).float()
        sh = F.silu(h @ self.w(p + "ffn_gate_shexp.weight").t()) * (h @ self.w(p + "ffn_up_shexp.weight").t())
        return out + sh @ self.w(p + "ffn_down_shexp.weight").t()


# ----------------------------------------------------------------------------- train / eval

def evaluate(model, ids, seq, limit=None):
    """Mean next-token loss over consecutive windows of seq tokens, each a fresh sequence
    (what flashgate-perplexity --ctx seq computes)."""
    n = (len(ids) // seq) * seq
    if limit:
        n = min(n, limit * seq)
    tot, cnt = 0.0, 0
    model.eval()
    with torch.no_grad():
        for off in range(0, n, seq * 8):
            w = ids[off:min(off + seq * 8, n)].view(-1, seq)
            logits = model(w[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1),
                                   reduction="sum")
            tot += loss.item()
            cnt += w[:, 1:].numel()
    model.train()
    return tot / cnt


def export(model, path):
    names = model.names
    with open(path, "wb") as f:
        f.write(b"FGW1")
        f.write(np.uint32(len(names)).tobytes())
        for name in names:
            t = model.bias[name] if name in model.bias else model.w(name).detach()
            a = np.ascontiguousarray(t.numpy().astype("<f4"))
            nb = name.encode()
            f.write(np.uint32(len(nb)).tobytes() + nb + np.uint64(a.size).tobytes())
            f.write(a.tobytes())


def train_mtp(a, W):
    """The second phase: the MTP block on the frozen trunk of --init-from, then the export."""
    run([os.path.join(a.bin, "flashgate-modelgen"), "--preset", "english", "--bpe-corpus", W("bpe.txt"),
         "--nextn", "1", "--out", W("init-mtp.gguf")])
    g, src = GGUFFile(W("init-mtp.gguf")), GGUFFile(a.init_from)
    if list(src.get("tokenizer.ggml.tokens") or []) != list(g.get("tokenizer.ggml.tokens")):
        sys.exit("--init-from %s has another vocabulary than this --work/--seed makes (train it with the "
                 "same --seed)" % a.init_from)
    hp = HP(g)
    shapes = {n: tuple(t.shape) for n, t in g.tensors.items()}
    g.close()
    model = Model(hp, shapes, a.seed)
    mtp = "blk.%d." % hp.n_layer
    with torch.no_grad():
        for name, shape in shapes.items():
            if name.startswith(mtp):
                continue
            if not src.has_tensor(name):
                sys.exit("--init-from %s has no tensor %s (not a model of the english preset)" % (a.init_from, name))
            t = torch.from_numpy(src.tensor_f64(name).astype(np.float32)).reshape(shape)
            if name in model.bias:
                model.bias[name].copy_(t)
            else:
                model.w(name).copy_(t)
                model.w(name).requires_grad_(False)
    src.close()
    for split in ("train", "heldout"):
        run([os.path.join(a.bin, "flashgate-tokenize"), "--model", W("init-mtp.gguf"), "--in",
             W(split + ".txt"), "--out", W(split + ".ids"), "--docs"])
    train_ids, held_ids = load_ids(W("train.ids")), load_ids(W("heldout.ids"))
    params = [p for n, p in model.p.items() if n.startswith(mtp.replace(".", "__"))]
    print("mtp: training %d parameters of %s on a frozen trunk of %d layers"
          % (sum(p.numel() for p in params), mtp, hp.n_layer), flush=True)
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(a.seed + 1)
    t0 = time.time()
    for step in range(1, a.mtp_steps + 1):
        lr = a.lr * min(1.0, step / a.warmup) * (1.0 - 0.9 * step / a.mtp_steps)
        for grp in opt.param_groups:
            grp["lr"] = lr
        off = torch.randint(0, len(train_ids) - a.seq - 1, (a.batch,), generator=gen)
        batch = torch.stack([train_ids[o:o + a.seq + 1] for o in off.tolist()])
        loads = {}
        logits = model.forward_mtp(batch[:, :-1], loads)
        loss = F.cross_entropy(logits.reshape(-1, hp.V), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        with torch.no_grad():
            for p, load in loads.items():
                b = model.bias[p + "exp_probs_b.bias"]
                b += a.bias_rate * torch.sign(load.mean() - load)
        if step % 10 == 0 or step == 1 or step == a.mtp_steps:
            print("mtp step %d loss %.4f lr %.2e %.1f min" % (step, loss.item(), lr, (time.time() - t0) / 60),
                  flush=True)
    # held out: the block's loss, and how often its greedy draft is the trunk's greedy token
    # (what greedy speculative decoding accepts)
    model.eval()
    with torch.no_grad():
        n = min(len(held_ids) // a.seq, 16) * a.seq
        w = held_ids[:n].view(-1, a.seq)
        drafts, trunk = model.forward_mtp(w[:, :-1]), model(w[:, :-1])
        hl = F.cross_entropy(drafts.reshape(-1, hp.V), w[:, 1:].reshape(-1)).item()
        agree = (drafts.argmax(-1) == trunk.argmax(-1)).float().mean().item()
    print("mtp final: held-out loss %.4f, draft = trunk greedy token %.1f %% (%d windows)"
          % (hl, 100 * agree, w.shape[0]), flush=True)
    export(model, W("weights-mtp.fgw"))
    run([os.path.join(a.bin, "flashgate-modelgen"), "--preset", "english", "--bpe-corpus", W("bpe.txt"),
         "--nextn", "1", "--weights", W("weights-mtp.fgw"), "--type", a.type, "--out", a.out])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "release", "bin"),
                    help="directory with flashgate-modelgen and flashgate-tokenize")
    ap.add_argument("--work", required=True, help="scratch directory (corpus, ids, checkpoints)")
    ap.add_argument("--out", required=True, help="the GGUF to write")
    ap.add_argument("--type", default="f16", help="weight type of --out (f32, f16, bf16, q8_0)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--decay-from", type=int, default=0,
                    help="step where the learning rate starts its linear decay (0: --steps x (1 - --decay-frac))")
    ap.add_argument("--decay-frac", type=float, default=0.25)
    ap.add_argument("--max-minutes", type=float, default=0,
                    help="time budget (0: none): once (1 - --decay-frac) of it has passed, the decay starts at "
                         "the current step and --steps shrinks to keep the same proportion; the log prints the "
                         "--steps/--decay-from pair that reproduces the run exactly")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=4e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--bias-rate", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--corpus-only", action="store_true", help="stop after stage 1")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--mtp-steps", type=int, default=0,
                    help="instead of training the trunk: train the MTP block for this many steps on the frozen "
                         "trunk of --init-from and write the model with the block (--lr, --warmup, --batch, "
                         "--seq as for the trunk)")
    ap.add_argument("--init-from", help="the trained GGUF (f32, f16 or bf16) whose trunk --mtp-steps keeps")
    a = ap.parse_args()
    if a.mtp_steps and not a.init_from:
        ap.error("--mtp-steps needs --init-from")

    torch.set_num_threads(a.threads)
    os.makedirs(a.work, exist_ok=True)
    W = lambda n: os.path.join(a.work, n)  # noqa: E731
    build_corpus(a.work, a.seed)
    if a.corpus_only:
        return
    if a.mtp_steps:
        return train_mtp(a, W)
    run([os.path.join(a.bin, "flashgate-modelgen"), "--preset", "english", "--bpe-corpus", W("bpe.txt"),
         "--out", W("init.gguf")])
    for split in ("train", "heldout"):
        run([os.path.join(a.bin, "flashgate-tokenize"), "--model", W("init.gguf"), "--in",
             W(split + ".txt"), "--out", W(split + ".ids"), "--docs"])
    g = GGUFFile(W("init.gguf"))
    hp = HP(g)
    shapes = {n: tuple(t.shape) for n, t in g.tensors.items()}
    g.close()
    train_ids, held_ids = load_ids(W("train.ids")), load_ids(W("heldout.ids"))
    model = Model(hp, shapes, a.seed)
    n_params = sum(p.numel() for p in model.parameters())
    print("model: %d parameters, vocab %d, %d training tokens, %d held-out tokens"
          % (n_params, hp.V, len(train_ids), len(held_ids)), flush=True)

    decay = [p for n, p in model.p.items() if p.dim() >= 2]
    no_decay = [p for n, p in model.p.items() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(a.seed)
    t0 = time.time()
    steps = a.steps
    decay_from = a.decay_from or int(round(steps * (1 - a.decay_frac)))
    timed = a.max_minutes > 0 and not a.decay_from
    step = 0
    while step < steps:
        step += 1
        spent = time.time() - t0
        if timed and a.warmup < step < decay_from and spent > a.max_minutes * 60 * (1 - a.decay_frac):
            decay_from = step
            steps = min(steps, step + int(round(step * a.decay_frac / (1 - a.decay_frac))))
            print("time budget: decay from step %d to step %d (reproduce with --steps %d --decay-from %d)"
                  % (decay_from, steps, steps, decay_from), flush=True)
        if step <= a.warmup:
            lr = a.lr * step / a.warmup
        elif step <= decay_from:
            lr = a.lr
        else:
            lr = a.lr * (1.0 - 0.9 * (step - decay_from) / max(1, steps - decay_from))
        for grp in opt.param_groups:
            grp["lr"] = lr
        off = torch.randint(0, len(train_ids) - a.seq - 1, (a.batch,), generator=gen)
        batch = torch.stack([train_ids[o:o + a.seq + 1] for o in off.tolist()])
        loads = {}
        logits = model(batch[:, :-1], loads)
        loss = F.cross_entropy(logits.reshape(-1, hp.V), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            for p, load in loads.items():
                b = model.bias[p + "exp_probs_b.bias"]
                b += a.bias_rate * torch.sign(load.mean() - load)
        el = time.time() - t0
        if step % 10 == 0 or step == 1:
            print("step %d loss %.4f lr %.2e %.1f min" % (step, loss.item(), lr, el / 60), flush=True)
        if step % a.eval_every == 0:
            hl = evaluate(model, held_ids, a.seq, limit=64)
            print("step %d held-out loss %.4f ppl %.2f (first 64 windows)" % (step, hl, math.exp(hl)),
                  flush=True)
            export(model, W("checkpoint.fgw.tmp"))   # a snapshot to try while training goes on
            os.replace(W("checkpoint.fgw.tmp"), W("checkpoint.fgw"))
    hl = evaluate(model, held_ids, a.seq)
    print("final: step %d (--steps %d --decay-from %d), held-out loss %.4f, perplexity %.3f (all %d-token "
          "windows)" % (step, steps, decay_from, hl, math.exp(hl), a.seq), flush=True)
    export(model, W("weights.fgw"))
    torch.save({"step": step, "bias": model.bias, "params": model.state_dict()}, W("final.pt"))
    run([os.path.join(a.bin, "flashgate-modelgen"), "--preset", "english", "--bpe-corpus", W("bpe.txt"),
         "--weights", W("weights.fgw"), "--type", a.type, "--out", a.out])


if __name__ == "__main__":
    main()
