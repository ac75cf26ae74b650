import sys,json,time,jax,numpy as np
from framework.backends.maxtext.benchmarks import decode_probe as d,grpo_step as g
from framework.backends.maxtext.benchmarks.shapes import parse_args
from framework.backends.maxtext.sampler import Sampler,SamplingParams
from framework.backends.maxtext.sharding import build_mesh
from framework.core.parallel import ParallelConfig as PC
m,o=sys.argv[1],sys.argv[2]
a=parse_args("p",sys.argv[3:],g.OPTIONS);c=g.model_config(a);f=m=="fsdp"
mo,_,_,p=g.random_model(c,build_mesh(PC(dp=1 if f else -1,fsdp=-1 if f else 1,tp=1,pp=1,ep=1,cp=1)))
s=Sampler(mo,eos_token_ids=[c.vocab_size],pad_token_id=0,prompt_bucket=a.prompt_tokens)
sp=SamplingParams(max_new_tokens=a.new_tokens,temperature=1.0,num_samples=a.generations)
ids=np.random.default_rng(0).integers(1,c.vocab_size,(a.prompts,a.prompt_tokens)).tolist()
t=[]
for k in range(4):
 t0=time.perf_counter();jax.block_until_ready(s.generate(p,ids,jax.random.key(k),sp));t.append(time.perf_counter()-t0)
h=s.lower(p,ids,jax.random.key(0),sp).compile().as_text();open(f"{o}/{m}_hlo.txt","w").write(h)
r={"d":jax.devices()[0].device_kind,"n":len(jax.devices()),"t":t,"ms":1e3*sorted(t[1:])[1]/a.new_tokens}
if f:
 with jax.profiler.trace(o+"/tr",create_perfetto_trace=True):jax.block_until_ready(s.generate(p,ids,jax.random.key(9),sp))
 r["k"]=d.kernel_table(o+"/tr",top=80,sources=d.hlo_sources(h))
json.dump(r,open(f"{o}/{m}.json","w"),indent=1);print(m,r["t"],r["ms"])
