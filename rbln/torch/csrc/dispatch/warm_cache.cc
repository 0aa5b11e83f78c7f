#include "rbln/torch/csrc/dispatch/warm_cache.h"

#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

namespace rbln::torch_backend {

void WarmKey::Reset(uint32_t overload_id) {
  bytes_.clear();
  Put(overload_id);
}

bool WarmKey::AddTensor(const at::Tensor& t) {
  if (!t.defined()) {
    Put('u');
    return true;
  }
  const at::ScalarType dtype = t.scalar_type();
  if (t.is_cpu() && t.dim() == 0) {
    // A Python scalar operand: its value is part of the key. Read directly;
    // item() would be a dispatcher round trip.
    Put('s');
    Put(static_cast<int8_t>(dtype));
    switch (dtype) {
      case at::kDouble:
        Put(*t.const_data_ptr<double>());
        return true;
      case at::kFloat:
        Put(*t.const_data_ptr<float>());
        return true;
      case at::kLong:
        Put(*t.const_data_ptr<int64_t>());
        return true;
      case at::kInt:
        Put(*t.const_data_ptr<int32_t>());
        return true;
      case at::kBool:
        Put(*t.const_data_ptr<bool>());
        return true;
      case at::kHalf:
        Put(t.const_data_ptr<c10::Half>()->x);
        return true;
      case at::kBFloat16:
        Put(t.const_data_ptr<c10::BFloat16>()->x);
        return true;
      default:
        return false;
    }
  }
  Put('t');
  Put(static_cast<int8_t>(dtype));
  Put(static_cast<int8_t>(t.device().type()));
  Put(static_cast<int8_t>(t.device().index()));
  Put(static_cast<int64_t>(t.storage_offset()));
  Put(static_cast<int32_t>(t.dim()));
  for (int64_t s : t.sizes()) Put(s);
  for (int64_t s : t.strides()) Put(s);
  return true;
}

bool WarmKey::Add(const c10::IValue& v) {
  if (v.isTensor()) return AddTensor(v.toTensor());
  if (v.isNone()) {
    Put('n');
  } else if (v.isDouble()) {
    Put('d');
    Put(v.toDouble());
  } else if (v.isInt()) {
    Put('i');
    Put(v.toInt());
  } else if (v.isBool()) {
    Put('b');
    Put(v.toBool());
  } else if (v.isIntList()) {
    Put('l');
    const c10::List<int64_t> list = v.toIntList();
    Put(static_cast<int32_t>(list.size()));
    for (int64_t x : list) Put(x);
  } else if (v.isBoolList()) {
    Put('B');
    const c10::List<bool> list = v.toBoolList();
    Put(static_cast<int32_t>(list.size()));
    for (bool x : list) Put(x);
  } else if (v.isString()) {
    Put('S');
    const std::string& s = v.toStringRef();
    Put(static_cast<int32_t>(s.size()));
    bytes_.append(s);
  } else if (v.isTensorList()) {
    Put('L');
    const c10::List<at::Tensor> list = v.toTensorList();
    Put(static_cast<int32_t>(list.size()));
    for (const at::Tensor& t : list) {
      if (!AddTensor(t)) return false;
    }
  } else {
    return false;  // Complex, symbolic, ...: not keyed.
  }
  return true;
}

WarmCache& WarmCache::Global() {
  static auto* cache = new WarmCache();
  return *cache;
}

std::shared_ptr<const WarmEntry> WarmCache::Find(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second;
}

void WarmCache::Insert(std::string key, std::shared_ptr<const WarmEntry> entry) {
  absl::MutexLock lock(&mu_);
  entries_[std::move(key)] = std::move(entry);
}

void WarmCache::Clear() {
  absl::MutexLock lock(&mu_);
  entries_.clear();
}

size_t WarmCache::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace rbln::torch_backend
